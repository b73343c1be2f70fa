// Package idempotencykey is what a client that sends an idempotency key
// and a server that honours it agree on: the names that carry the key on
// the wire and the form of a valid key. A key is chosen by the client,
// unique to one logical request, and sent unchanged on every attempt of
// it; the server runs the first attempt and replays its result to the
// others (package idempotency over HTTP, grpcidempotency over gRPC).
//
// Client packages import this package, not the server's, for a constant:
// it imports only the standard library, and nothing else in the module.
package idempotencykey

import (
	"errors"
	"strings"
)

// Header is the HTTP request header that carries the key, as the IETF
// httpapi draft names it.
const Header = "Idempotency-Key"

// MetadataKey is the gRPC request metadata key that carries the key:
// [Header] in gRPC's lower case.
const MetadataKey = "idempotency-key"

// MaxLen is the longest key accepted, in bytes.
const MaxLen = 255

// ErrInvalid is returned by [Parse] for a malformed key.
var ErrInvalid = errors.New("invalid idempotency key")

// Parse reads a key as sent in [Header] or [MetadataKey]: either a
// structured-field string as the draft specifies ("..." with \" and \\
// escapes) or, as Stripe accepts, a bare run of visible ASCII. The key is 1
// to [MaxLen] bytes of printable ASCII. Surrounding spaces are ignored. It
// returns [ErrInvalid] for anything else. It is safe for concurrent use.
func Parse(v string) (string, error) {
	v = strings.Trim(v, " \t")
	if strings.HasPrefix(v, `"`) {
		return parseQuoted(v)
	}
	if len(v) == 0 || len(v) > MaxLen {
		return "", ErrInvalid
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c > '~' || c == '"' || c == '\\' {
			return "", ErrInvalid
		}
	}
	return v, nil
}

// parseQuoted reads a structured-field string (RFC 8941 section 3.3.3).
func parseQuoted(v string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i >= len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", ErrInvalid
			}
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 || b.Len() == 0 || b.Len() > MaxLen {
				return "", ErrInvalid
			}
			return b.String(), nil
		case c < ' ' || c > '~':
			return "", ErrInvalid
		default:
			b.WriteByte(c)
		}
	}
	return "", ErrInvalid
}

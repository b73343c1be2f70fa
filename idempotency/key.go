package idempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"

	"github.com/resiliencekit/resiliencekit/idempotencykey"
)

// Header is the request header that the middleware reads the key from:
// [idempotencykey.Header], under which clients find it.
const Header = idempotencykey.Header

// scopeKey returns key in scope: a hash of the scope, so that any scope
// (bytes a store would refuse included) makes an unambiguous key of
// printable ASCII, and the key.
func scopeKey(scope, key string) string {
	sum := sha256.Sum256([]byte(scope))
	return hex.EncodeToString(sum[:16]) + ":" + key
}

// fingerprint identifies an HTTP request's payload: its method, path,
// query and body.
func fingerprint(r *http.Request, body []byte) string {
	s := sha256.New()
	io.WriteString(s, r.Method)
	s.Write([]byte{0})
	io.WriteString(s, r.URL.EscapedPath())
	s.Write([]byte{0})
	io.WriteString(s, r.URL.RawQuery)
	s.Write([]byte{0})
	s.Write(body)
	return hex.EncodeToString(s.Sum(nil))
}

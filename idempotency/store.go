package idempotency

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"time"
	"unicode/utf8"
)

// Record is what a [Store] keeps under a key: a claim while the first
// request runs, then its result. The result is opaque to the store and to
// [Guard]: [Middleware] keeps an HTTP response in it, package
// grpcidempotency a gRPC answer.
type Record struct {
	// Fingerprint identifies the request's payload (method, path, body).
	Fingerprint string `json:"fp"`
	// Token identifies the claim of the request that holds the key: the
	// fencing token.
	Token string `json:"token,omitempty"`
	// Done is false while the first request runs.
	Done bool `json:"done,omitempty"`
	// Status, Header and Body are the stored result once Done.
	Status int         `json:"status,omitempty"`
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"body,omitempty"`
	// Truncated means the result was too large to store whole and cannot
	// be replayed.
	Truncated bool `json:"truncated,omitempty"`
	// Incomplete means the result was not recorded whole, because its
	// client left before it was sent (mid-stream, or before anything was
	// written): it is not replayed, and the request is not run again.
	Incomplete bool `json:"incomplete,omitempty"`
}

// recordFields is Record without its methods, for its JSON.
type recordFields Record

// recordJSON is how a Record is written in JSON: its fields, and the
// header's keys of which a value is not valid UTF-8 apart, base64-encoded,
// since a JSON string would change those bytes (RFC 9110 allows bytes 0x80
// to 0xFF in a field value, as in a Latin-1 file name, and net/http sends
// them as they are).
type recordJSON struct {
	recordFields
	HeaderBase64 http.Header `json:"header64,omitempty"`
}

// MarshalJSON writes r as JSON, as the Redis and SQL stores keep it,
// keeping header values that are not valid UTF-8 byte for byte.
func (r Record) MarshalJSON() ([]byte, error) {
	w := recordJSON{recordFields: recordFields(r)}
	for k, vs := range r.Header {
		if validUTF8(vs) {
			continue
		}
		if w.HeaderBase64 == nil {
			w.Header, w.HeaderBase64 = r.Header.Clone(), http.Header{}
		}
		enc := make([]string, len(vs))
		for i, v := range vs {
			enc[i] = base64.StdEncoding.EncodeToString([]byte(v))
		}
		w.HeaderBase64[k] = enc
		delete(w.Header, k)
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads a Record that MarshalJSON wrote.
func (r *Record) UnmarshalJSON(data []byte) error {
	var w recordJSON
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	for k, enc := range w.HeaderBase64 {
		vs := make([]string, len(enc))
		for i, e := range enc {
			v, err := base64.StdEncoding.DecodeString(e)
			if err != nil {
				return err
			}
			vs[i] = string(v)
		}
		if w.Header == nil {
			w.Header = http.Header{}
		}
		w.Header[k] = vs
	}
	*r = Record(w.recordFields)
	return nil
}

// validUTF8 reports whether every one of vs is valid UTF-8.
func validUTF8(vs []string) bool {
	for _, v := range vs {
		if !utf8.ValidString(v) {
			return false
		}
	}
	return true
}

// Holds reports whether r is the claim of claim.Token still in flight: what
// a [Store]'s Begin finds when a claim of its own was written and the
// answer lost. It is safe for concurrent use.
func (r *Record) Holds(claim Record) bool {
	return !r.Done && claim.Token != "" && r.Token == claim.Token
}

// ErrFull is returned by a [Store]'s Begin when it has no room for another
// claim: every entry is a request still running. The middleware answers
// 503 with Retry-After.
var ErrFull = errors.New("idempotency store full of requests in flight")

// ErrWritesRefused is wrapped in the error of a [Store]'s Begin that found
// no record under the key and could not write the claim, while it still
// reads: a Redis out of memory under noeviction or refusing writes
// (min-replicas-to-write, a failed save, a read-only replica), a read-only
// database or a full disk. A [Guard] that has failed open still asks such
// a store first, so that the records it holds are replayed and the claims
// in flight there answered as in progress, and runs on its local records
// only the keys that the store has no record of.
var ErrWritesRefused = errors.New("idempotency store refuses writes")

// ErrNotOwner is returned by a [Store] asked to complete or release a claim
// that is no longer the one in the store (it expired and was claimed anew).
var ErrNotOwner = errors.New("idempotency claim no longer held")

// Store keeps records by key. Implementations are safe for concurrent use,
// Begin is atomic across every process sharing the store, and every method
// honours ctx's deadline. A claim held by claim.Token is the only one that
// Renew, Complete and Release act on.
type Store interface {
	// Begin claims key with claim (not Done) for lease if the key is free
	// or its claim's lease has run out, and returns nil. Otherwise it
	// returns the record found, except claim itself (the key held by
	// claim.Token, as a write sent again after its answer was lost finds
	// it): then it returns nil too. It returns [ErrFull] if it has no room,
	// and an error that wraps [ErrWritesRefused] if it could read the key
	// (none there) but not write the claim.
	Begin(ctx context.Context, key string, claim Record, lease time.Duration) (*Record, error)
	// Renew extends the lease of claim to lease from now. It returns
	// [ErrNotOwner] if the key no longer holds claim.
	Renew(ctx context.Context, key string, claim Record, lease time.Duration) error
	// Complete replaces claim by the finished rec, kept for ttl. It returns
	// [ErrNotOwner] if the key no longer holds claim.
	Complete(ctx context.Context, key string, claim, rec Record, ttl time.Duration) error
	// Release frees key if it still holds claim, so the request can be
	// retried. It returns [ErrNotOwner] if the key no longer holds claim,
	// as when it holds a completed record: Release never frees one, which
	// is what keeps a record that a handler committed itself (see
	// [Claim.Completed]) from a [Claim.Abandon] after it.
	Release(ctx context.Context, key string, claim Record) error
}

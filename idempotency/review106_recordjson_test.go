package idempotency_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// the encoding before the session: the struct's fields, no methods.
type review106Plain struct {
	Fingerprint string      `json:"fp"`
	Token       string      `json:"token,omitempty"`
	Done        bool        `json:"done,omitempty"`
	Status      int         `json:"status,omitempty"`
	Header      http.Header `json:"header,omitempty"`
	Body        []byte      `json:"body,omitempty"`
	Truncated   bool        `json:"truncated,omitempty"`
	Incomplete  bool        `json:"incomplete,omitempty"`
}

func TestReview106RecordJSONCompatAndRoundTrip(t *testing.T) {
	recs := []idempotency.Record{
		{Fingerprint: "fp", Token: "t"},
		{Fingerprint: "<a&b>", Token: "\u2028x"},
		{Fingerprint: "fp", Done: true, Status: 201, Header: http.Header{"A": {"x<y>&"}, "B": {}, "C": nil}, Body: []byte{0, 1, 0xff}},
		{Fingerprint: "fp", Done: true, Header: http.Header{"Content-Disposition": {"attachment; filename=\"caf\xe9.txt\""}, "X": {"ok", "\xff"}}},
		{Fingerprint: "fp", Done: true, Header: http.Header{"X": {strings.Repeat("\xfe", 1<<20)}}},
		{Fingerprint: "fp", Done: true, Header: http.Header{"X": {"a\x00b", ""}}},
	}
	for i, r := range recs {
		got, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if validAll(r.Header) {
			old, _ := json.Marshal(review106Plain(r))
			if !bytes.Equal(got, old) {
				t.Errorf("%d: bytes differ from the encoding before: %s vs %s", i, got, old)
			}
			gotPtr, _ := json.Marshal(&r)
			if !bytes.Equal(gotPtr, old) {
				t.Errorf("%d: pointer encoding differs", i)
			}
		}
		var back idempotency.Record
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		again, _ := json.Marshal(back)
		if !reflect.DeepEqual(normal(back), normal(r)) {
			t.Errorf("%d: round trip changed the record: %q vs %q", i, back.Header, r.Header)
		}
		if !bytes.Equal(again, got) {
			t.Errorf("%d: re-marshaled bytes differ (a compare-and-set on them would fail): %.200s vs %.200s", i, again, got)
		}
		// a record written before the session reads back the same
		old, _ := json.Marshal(review106Plain(r))
		var fromOld idempotency.Record
		if err := json.Unmarshal(old, &fromOld); err != nil {
			t.Errorf("%d: old bytes unreadable: %v", i, err)
		}
	}
}

func validAll(h http.Header) bool {
	for _, vs := range h {
		for _, v := range vs {
			if !utf8.ValidString(v) {
				return false
			}
		}
	}
	return true
}

// normal: nil and empty slices and bodies compare equal, as JSON keeps them.
func normal(r idempotency.Record) idempotency.Record {
	if len(r.Body) == 0 {
		r.Body = nil
	}
	if len(r.Header) == 0 {
		r.Header = nil
	}
	for k, vs := range r.Header {
		if len(vs) == 0 {
			r.Header[k] = nil
		}
	}
	return r
}

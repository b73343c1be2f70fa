package idempotencykey_test

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/resiliencekit/resiliencekit/idempotencykey"
)

// Parse's promise: the key is 1 to MaxLen bytes of printable ASCII, or
// ErrInvalid; whatever the input. A bare key is itself; a quoted one its
// content unescaped.
func TestReview165ParseOnlyEverGivesPrintableKeys(t *testing.T) {
	r := rand.New(rand.NewPCG(165, 1))
	alphabet := []byte(" \t\"\\az:{}*\x00\x7f\xff\r\n~!")
	for i := range 200000 {
		n := r.IntN(300)
		b := make([]byte, n)
		for j := range b {
			if r.IntN(4) == 0 {
				b[j] = byte(r.IntN(256))
			} else {
				b[j] = alphabet[r.IntN(len(alphabet))]
			}
		}
		if i%3 == 0 && n > 1 {
			b[0], b[n-1] = '"', '"'
		}
		k, err := idempotencykey.Parse(string(b))
		if err != nil {
			if err != idempotencykey.ErrInvalid {
				t.Fatalf("%q: error %v, not ErrInvalid", b, err)
			}
			continue
		}
		if len(k) < 1 || len(k) > idempotencykey.MaxLen {
			t.Fatalf("%q: key of %d bytes", b, len(k))
		}
		for _, c := range []byte(k) {
			if c < ' ' || c > '~' {
				t.Fatalf("%q: key %q has byte %#x", b, k, c)
			}
		}
	}
	// Round trips: a key quoted as RFC 8941 says parses back to itself.
	for _, k := range []string{"a", `a"b`, `a\b`, " a ", strings.Repeat(`"`, 255), strings.Repeat("x", 255)} {
		q := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(k) + `"`
		got, err := idempotencykey.Parse(q)
		if err != nil || got != k {
			t.Errorf("Parse(%s) = %q, %v; want %q", q, got, err, k)
		}
	}
	if _, err := idempotencykey.Parse(`"` + strings.Repeat("x", 256) + `"`); err == nil {
		t.Error("a quoted key of 256 bytes was accepted")
	}
	if _, err := idempotencykey.Parse(strconv.Quote("\x01")); err == nil {
		t.Error("a control byte was accepted")
	}
}

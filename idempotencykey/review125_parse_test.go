package idempotencykey_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/resiliencekit/resiliencekit/idempotencykey"
)

func TestReview125_ParseBounds(t *testing.T) {
	ok := func(v, want string) {
		t.Helper()
		got, err := idempotencykey.Parse(v)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %q, %v; want %q", v, got, err, want)
		}
	}
	bad := func(v string) {
		t.Helper()
		if got, err := idempotencykey.Parse(v); err == nil {
			t.Errorf("Parse(%q) = %q, want ErrInvalid", v, got)
		}
	}
	a255 := strings.Repeat("a", 255)
	ok(a255, a255)
	bad(a255 + "a")
	ok(`"`+a255+`"`, a255)
	bad(`"` + a255 + `a"`)
	ok(`"`+strings.Repeat(`\\`, 255)+`"`, strings.Repeat(`\`, 255))
	bad(`"` + strings.Repeat(`\\`, 256) + `"`)
	for _, v := range []string{"", " ", `""`, `"`, `"a`, `"a\"`, `"a"b"`, "a b", "ключ", "a\x7f", "a\x00", `"a\x"`, `"é"`, "\t\t"} {
		bad(v)
	}
	// Every accepted key is 1 to MaxLen bytes of printable ASCII.
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		b := make([]byte, r.IntN(8))
		for j := range b {
			b[j] = byte(r.IntN(256))
			if r.IntN(2) == 0 {
				b[j] = "\"\\ a\t"[r.IntN(5)]
			}
		}
		k, err := idempotencykey.Parse(string(b))
		if err != nil {
			continue
		}
		if len(k) == 0 || len(k) > idempotencykey.MaxLen {
			t.Fatalf("Parse(%q) = %q: length", b, k)
		}
		for _, c := range []byte(k) {
			if c < ' ' || c > '~' {
				t.Fatalf("Parse(%q) = %q: not printable ASCII", b, k)
			}
		}
	}
}

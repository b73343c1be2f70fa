package idempotencykey_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/resiliencekit/resiliencekit/idempotencykey"
)

func r56Quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

func r56Valid(k string) bool {
	if len(k) == 0 || len(k) > idempotencykey.MaxLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < ' ' || k[i] > '~' {
			return false
		}
	}
	return true
}

func TestReview56ParseTable(t *testing.T) {
	long := strings.Repeat("a", 255)
	cases := []struct {
		in   string
		want string
		ok   bool
	}{
		{"", "", false}, {" ", "", false}, {"\t", "", false}, {`""`, "", false},
		{"a", "a", true}, {`"a"`, "a", true}, {` "a" `, "a", true}, {`"a" x`, "", false},
		{"A", "A", true}, {"a b", "", false}, {`"a b"`, "a b", true}, {`" "`, " ", true},
		{"a\x00", "", false}, {`"a` + "\x00" + `"`, "", false}, {"a\x7f", "", false}, {"é", "", false}, {`"é"`, "", false},
		{`"\a"`, "", false}, {`"\\"`, `\`, true}, {`"\""`, `"`, true}, {`"a`, "", false}, {`"a\"`, "", false},
		{`a"`, "", false}, {`a\`, "", false}, {long, long, true}, {long + "a", "", false},
		{r56Quote(long), long, true}, {r56Quote(long + "a"), "", false},
		{r56Quote(strings.Repeat(`"`, 255)), strings.Repeat(`"`, 255), true},
		{`"a","b"`, "", false}, {"a,b", "a,b", true}, {"a, b", "", false},
		{"\ta\t", "a", true}, {"\na", "", false}, {"a\r", "", false},
		{"\"a\"\t", "a", true}, {"\"\ta\"", "", false},
	}
	for _, c := range cases {
		got, err := idempotencykey.Parse(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("Parse(%q) = %q, %v; want %q ok=%v", c.in, got, err, c.want, c.ok)
		}
		if err == nil && !r56Valid(got) {
			t.Errorf("Parse(%q) = %q: not 1..255 printable ASCII", c.in, got)
		}
	}
}

// Every printable key round-trips through the quoted form; bare form where
// allowed; and Parse(x) is always a valid key.
func TestReview56ParseRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(56, 56))
	for n := 0; n < 20000; n++ {
		l := 1 + r.IntN(300)
		b := make([]byte, l)
		for i := range b {
			if r.IntN(50) == 0 {
				b[i] = byte(r.IntN(256))
			} else {
				b[i] = byte(' ' + r.IntN(95))
			}
		}
		s := string(b)
		got, err := idempotencykey.Parse(r56Quote(s))
		if r56Valid(s) {
			if err != nil || got != s {
				t.Fatalf("quoted %q: %q %v", s, got, err)
			}
		} else if err == nil {
			t.Fatalf("quoted invalid %q accepted as %q", s, got)
		}
		got, err = idempotencykey.Parse(s)
		if err == nil && !r56Valid(got) {
			t.Fatalf("raw %q accepted as invalid %q", s, got)
		}
		if err == nil && !strings.HasPrefix(strings.Trim(s, " \t"), `"`) && got != strings.Trim(s, " \t") {
			t.Fatalf("bare %q -> %q", s, got)
		}
	}
}

func FuzzReview56Parse(f *testing.F) {
	f.Add(`"a\"b"`)
	f.Fuzz(func(t *testing.T, s string) {
		got, err := idempotencykey.Parse(s)
		if err == nil && !r56Valid(got) {
			t.Fatalf("%q -> %q", s, got)
		}
		if err == nil {
			if g2, err := idempotencykey.Parse(r56Quote(got)); err != nil || g2 != got {
				t.Fatalf("requote %q -> %q %v", got, g2, err)
			}
		}
	})
}

package idempotencykey_test

import (
	"strings"
	"testing"

	"github.com/resiliencekit/resiliencekit/idempotencykey"
)

// Parse's doc: 1 to MaxLen bytes of printable ASCII, bare or as a
// structured-field string; surrounding spaces ignored; ErrInvalid else.
func TestReview102_ParseClaims(t *testing.T) {
	long := strings.Repeat("a", idempotencykey.MaxLen)
	for _, c := range []struct {
		in, want string
		ok       bool
	}{
		{long, long, true},
		{long + "a", "", false},
		{`"` + long + `"`, long, true},
		{`"` + long + `a"`, "", false},
		{`"` + strings.Repeat(`\"`, idempotencykey.MaxLen) + `"`, strings.Repeat(`"`, idempotencykey.MaxLen), true},
		{`"` + strings.Repeat(`\\`, idempotencykey.MaxLen+1) + `"`, "", false},
		{" \tKey-1\t ", "Key-1", true},
		{"key\x7f", "", false},
		{"kéy", "", false},
		{`"kéy"`, "", false},
		{`"a b"`, "a b", true},
		{"a b", "", false},
		{`""`, "", false},
		{`"`, "", false},
		{`"a\"`, "", false},
		{`"a"b"`, "", false},
		{`"a";x=1`, "", false},
		{"\x00", "", false},
		{`"a\x"`, "", false},
		{"ABC", "ABC", true},
	} {
		got, err := idempotencykey.Parse(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("Parse(%q) = %q, %v; want %q ok=%v", c.in, got, err, c.want, c.ok)
		}
		if err != nil && err != idempotencykey.ErrInvalid {
			t.Errorf("Parse(%q): error %v is not ErrInvalid", c.in, err)
		}
	}
}

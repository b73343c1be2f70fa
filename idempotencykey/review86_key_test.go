package idempotencykey

import (
	"strings"
	"testing"
)

func review86Quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

func review86Check(t *testing.T, v string) {
	k, err := Parse(v)
	if err != nil {
		if k != "" {
			t.Errorf("Parse(%q) = %q with error", v, k)
		}
		return
	}
	if len(k) == 0 || len(k) > MaxLen {
		t.Errorf("Parse(%q) = key of %d bytes", v, len(k))
	}
	for i := 0; i < len(k); i++ {
		if k[i] < ' ' || k[i] > '~' {
			t.Errorf("Parse(%q) = %q: byte %#x", v, k, k[i])
		}
	}
	// the quoted form of any valid key parses back to it
	if k2, err := Parse(review86Quote(k)); err != nil || k2 != k {
		t.Errorf("Parse(quote(%q)) = %q, %v", k, k2, err)
	}
}

func FuzzReview86Parse(f *testing.F) {
	for _, s := range []string{"", `"`, `""`, `"\"`, `"a\`, `"a\"b"`, " abc ", "\tabc", "a b", strings.Repeat("x", 255), strings.Repeat("x", 256),
		`"` + strings.Repeat("x", 255) + `"`, `"` + strings.Repeat("x", 256) + `"`, `"a"b"`, `"a" `, "\xff", `"\xff"`, "é", `"a\\"`, `"\\"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) { review86Check(t, v) })
}

func TestReview86ParseEdges(t *testing.T) {
	cases := map[string]bool{
		"":                                    false,
		`""`:                                  false,
		`"a"`:                                 true,
		`"a b"`:                               true,
		"a b":                                 false,
		strings.Repeat("x", 255):              true,
		strings.Repeat("x", 256):              false,
		`"` + strings.Repeat("x", 255) + `"`:  true,
		`"` + strings.Repeat("x", 256) + `"`:  false,
		`"` + strings.Repeat(`\\`, 255) + `"`: true,
		`"` + strings.Repeat(`\\`, 256) + `"`: false,
		" \tabc\t ":                           true,
		"abc\r":                               false,
		`"abc`:                                false,
		`"a"b"`:                               false,
		"\x00":                                false,
		"a\x7f":                               false,
	}
	for v, ok := range cases {
		_, err := Parse(v)
		if (err == nil) != ok {
			t.Errorf("Parse(%q) err %v, want ok=%v", v, err, ok)
		}
		review86Check(t, v)
	}
}

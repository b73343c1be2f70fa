package idempotencykey_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/idempotencykey"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want string
		ok   bool
	}{
		{"8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324", true},
		{`"8e03978e-40d5"`, "8e03978e-40d5", true},
		{`"a b"`, "a b", true},
		{`"say \"hi\" \\o/"`, `say "hi" \o/`, true},
		{"  key-1 ", "key-1", true},
		{strings.Repeat("k", 255), strings.Repeat("k", 255), true},
		{strings.Repeat("k", 256), "", false},
		{"", "", false},
		{`""`, "", false},
		{`"open`, "", false},
		{`"a"b"`, "", false},
		{`"bad \n escape"`, "", false},
		{`"bad \x"`, "", false},
		{"a b", "", false},
		{"tab\there", "", false},
		{"ключ", "", false},
		{"nul\x00", "", false},
	}
	for _, tt := range tests {
		got, err := idempotencykey.Parse(tt.in)
		if tt.ok {
			assert.NoError(t, err, "%q", tt.in)
		} else {
			assert.ErrorIs(t, err, idempotencykey.ErrInvalid, "%q", tt.in)
		}
		assert.Equal(t, tt.want, got, "%q", tt.in)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, `"a\"b"`, `"\\"`, "", `"`, " x ", "\x7f", strings.Repeat("z", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := idempotencykey.Parse(s)
		if err != nil {
			assert.Empty(t, k)
			return
		}
		assert.NotEmpty(t, k)
		assert.LessOrEqual(t, len(k), idempotencykey.MaxLen)
		for i := 0; i < len(k); i++ {
			assert.True(t, k[i] >= ' ' && k[i] <= '~', "printable ASCII only")
		}
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(k) + `"`
		back, err := idempotencykey.Parse(quoted)
		assert.NoError(t, err, "every key can be sent quoted")
		assert.Equal(t, k, back)
	})
}

// TestTheNamesAgree: gRPC's metadata key is the HTTP header, lower-cased.
func TestTheNamesAgree(t *testing.T) {
	assert.Equal(t, strings.ToLower(idempotencykey.Header), idempotencykey.MetadataKey)
}

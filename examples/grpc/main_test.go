package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the example and checks what it shows.
func TestRun(t *testing.T) {
	var out strings.Builder
	require.NoError(t, run(&out))
	t.Log("\n" + out.String())
	for _, want := range []string{
		`Get (NO_SIDE_EFFECTS): OK "get:a" after 3 attempts`,
		"Create without a key: Unavailable after 1 attempt",
		`Create with a key: OK "created:order-2" after 2 attempts`,
		"the same key again: OK, replayed: the handler ran 2 times in all",
		"pushback 200 ms: OK after 2 attempts, waited at least 200 ms: true",
		"pushback -1 (don't retry): ResourceExhausted after 1 attempt",
		`List failing before its first message: OK ["item-0" "item-1" "item-2"] after 2 attempts`,
		`List failing after its first message: Unavailable ["item-0"] after 1 attempt (committed)`,
		`Upload failing after 2 messages: OK "a,b,c"; the server got ["a" "b"], then ["a" "b" "c"]`,
		"call 4: Unavailable, breaker open: true",
		"call 5: Unavailable, breaker open: true",
		"the server got 9 attempts",
	} {
		assert.Contains(t, out.String(), want)
	}
}

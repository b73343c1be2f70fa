package main

import (
	"strings"
	"testing"
)

// TestFirstHour runs the program and checks what its reader is told: the
// flaky calls succeed, the dead dependency opens the breaker and later
// calls are not sent, and the function succeeds on its third try.
func TestFirstHour(t *testing.T) {
	var out strings.Builder
	run(&out)
	got := out.String()
	for _, want := range []string{
		"Legend:",
		"call 1: stock=42 err=<nil>",
		"server saw 4 requests for 2 calls",
		"from=closed to=open",
		`call 5: breaker open=true err=breaker "inventory": circuit breaker is open`,
		"server saw 6 requests for 4 calls",
		"call 7: price=9.99 err=<nil> after 3 tries",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

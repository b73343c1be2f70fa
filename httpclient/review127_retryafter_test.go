package httpclient_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/httpclient"
)

// RFC 9110: Retry-After = HTTP-date / delay-seconds, delay-seconds = 1*DIGIT.
// A long delay-seconds is as valid as a far date; the doc says false only
// for an empty or malformed value. A far date is honoured (to MaxDelay by
// the policy); the same wait in seconds is dropped, and the client retries
// after its own short jitter instead of waiting.
func TestReview127RetryAfterLongSeconds(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if d, ok := httpclient.ParseRetryAfter(now.Add(100*365*24*time.Hour).UTC().Format(http.TimeFormat), now); !ok || d < 99*365*24*time.Hour {
		t.Fatalf("far date: %v %v", d, ok)
	}
	for _, v := range []string{"1000000000", "4294967296", "99999999999999999999"} {
		if d, ok := httpclient.ParseRetryAfter(v, now); !ok || d < 999_999_999*time.Second {
			t.Errorf("Retry-After: %s (valid delay-seconds) read as %v, %v: the hint is dropped", v, d, ok)
		}
	}
	for _, v := range []string{"-5", "1.5", "5s", "", " ", "0x10", "+5"} {
		if _, ok := httpclient.ParseRetryAfter(v, now); ok {
			t.Errorf("malformed %q accepted", v)
		}
	}
	if d, ok := httpclient.ParseRetryAfter(now.Add(-time.Hour).UTC().Format(http.TimeFormat), now); !ok || d != 0 {
		t.Errorf("past date: %v %v", d, ok)
	}
}

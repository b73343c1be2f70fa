package httpclient_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// Hostile Request-Attempt values from an untrusted caller: the call
// succeeds, and what reaches D is C's own attempt header and budget.
func TestReview51_HostileAttemptHeaders(t *testing.T) {
	hops, d := review51Chain(t, false, review51Opts{})
	vals := [][]string{{"0/0"}, {"-1/3"}, {"999999999/999999999"}, {"3/1"}, {"1/3; hedge; hedge"}, {"1/3", "2/3"}, {strings.Repeat("1", 60000)}, {"NaN"}, {"1/0"}}
	for _, v := range vals {
		req, _ := http.NewRequest("GET", hops[0].srv.URL, nil)
		req.Header[retrysignal.AttemptHeader] = v
		req.Header["Request-Timeout-Ms"] = []string{"2000"}
		req.Header["No-Retry"] = []string{"1"}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("%.30q: %v", v, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%.30q: %d", v, resp.StatusCode)
		}
		n := d.seen.Load()
		hv, _ := d.hdrs.Load(n)
		h := hv.(http.Header)
		if got := h.Values(retrysignal.AttemptHeader); len(got) != 1 || got[0] != "1/3" {
			t.Errorf("D got attempt header %q", got)
		}
		if got := h.Values(deadline.Header); len(got) != 1 {
			t.Errorf("D got budget %q", got)
		} else if b, _ := deadline.Parse(got[0]); b > 2000e6 {
			t.Errorf("D budget %v", b)
		}
	}
}

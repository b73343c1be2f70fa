package httpclient_test

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// review170: Expect: 100-continue to a hung dependency (it never says
// 100, nor anything else): net/http waits for the 100 before it reads the
// body; that wait is the dependency's, and the failure must count. Also
// a body that trickles for a third of the time, well under half.
func TestReview170HungDependencyFastOrExpectCounts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		expect bool
		body   func() io.ReadCloser
	}{
		{"expect-100-fast-body", true, func() io.ReadCloser { return io.NopCloser(strings.NewReader(strings.Repeat("x", 4096))) }},
		{"trickle-third", false, func() io.ReadCloser { return r170Trickle(t, 20*time.Millisecond, 200*time.Millisecond) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := r170Listener(t, "drain")
			b := breaker.New("r170-"+tc.name, breaker.ConsecutiveFailures(3))
			p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithTimeBudget(600*time.Millisecond))
			hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p))}
			var wg sync.WaitGroup
			errs := make([]error, 3)
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					req, _ := http.NewRequest(http.MethodPost, url, tc.body())
					if tc.expect {
						req.Header.Set("Expect", "100-continue")
					}
					resp, err := hc.Do(req)
					if resp != nil {
						resp.Body.Close()
					}
					errs[i] = err
				}()
			}
			wg.Wait()
			for i, err := range errs {
				if err == nil || resilience.Classify(err) == resilience.ClassRejected {
					t.Errorf("call %d: %v (class %v)", i, err, resilience.Classify(err))
				}
			}
			if s := b.State(); s != resilience.StateOpen {
				t.Errorf("breaker %v", s)
			}
		})
	}
}

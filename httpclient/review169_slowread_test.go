package httpclient_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// The caller reads a healthy answer's body slowly (it streams it to a slow
// client of its own); the budget, which lasts until the body is closed,
// cuts the read. That is the caller's pace, not the dependency's failure:
// the breaker must stay closed for the calls that follow.
func TestReview169_SlowCallerReadDoesNotCount(t *testing.T) {
	body := strings.Repeat("r", 4<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, body)
	}))
	defer srv.Close()
	b := breaker.New("review169-slowread")
	p := pipeline.New(
		pipeline.WithTimeBudget(300*time.Millisecond), // the quick start's 2 s, shortened
		pipeline.WithBreaker(b),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))),
	)
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p), httpclient.Base(review169Base()))}
	cut := 0
	for range 7 {
		resp, err := hc.Get(srv.URL)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		buf := make([]byte, 16<<10)
		for {
			_, err := resp.Body.Read(buf)
			if err != nil {
				if err != io.EOF {
					cut++
				}
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		resp.Body.Close()
	}
	if cut == 0 {
		t.Fatalf("no read was cut: the test did not test")
	}
	if st := b.State(); st != resilience.StateClosed {
		t.Errorf("%d slow reads cut by the budget opened the breaker: %v", cut, st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("then a good call: %v", err)
	}
	resp.Body.Close()
}

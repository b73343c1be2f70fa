package httpclient_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// A GET whose retry queued for the limit as the breaker opened (on other
// calls' failures) is not sent and waits; the breaker closes on another
// caller's probe. The promise (pipeline.WaitWhenOpen): "the retry policy's
// MaxAttempts holds over the whole call, waits included", attempts numbered
// on (Request-Attempt "n/max").
func TestReview27_RequestAttemptHeaderPastMax(t *testing.T) {
	b := breaker.New("review27-http", breaker.ConsecutiveFailures(2), breaker.OpenTimeout(300*time.Millisecond), breaker.HalfOpenRequests(1))
	lim := limit.NewFixed(1, limit.MaxWaiting(4))
	p := pipeline.New(
		pipeline.WithBreaker(b),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3),
			retrypolicy.BaseDelay(30*time.Millisecond), retrypolicy.Jitter(retrypolicy.None))),
		pipeline.WithLimit(lim),
		pipeline.WaitWhenOpen(),
		pipeline.WithTimeBudget(5*time.Second),
	)
	other := pipeline.New(pipeline.WithBreaker(b), pipeline.WaitWhenOpen(), pipeline.WithTimeBudget(10*time.Second))

	var mu sync.Mutex
	var headers []string
	holderDone := make(chan struct{})
	otherErr := make(chan error, 1)
	errDep := errors.New("connection reset")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		headers = append(headers, r.Header.Get(retrysignal.AttemptHeader))
		first := len(headers) == 1
		mu.Unlock()
		if first {
			queued := make(chan struct{})
			go func() {
				defer close(holderDone)
				close(queued)
				tk, err := lim.Acquire(context.Background())
				if err != nil {
					t.Errorf("acquire: %v", err)
					return
				}
				time.Sleep(100 * time.Millisecond)
				for i := 0; i < 2; i++ {
					_ = b.Execute(context.Background(), func(context.Context) error { return errDep })
				}
				go func() {
					_, err := pipeline.Do(context.Background(), other, func(context.Context) (int, error) { return 1, nil })
					otherErr <- err
				}()
				time.Sleep(20 * time.Millisecond)
				lim.Release(tk, nil)
			}()
			<-queued
			time.Sleep(10 * time.Millisecond)
		}
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	client := httpclient.New(httpclient.WithPipeline(p))
	err := client.GetJSON(context.Background(), srv.URL, nil)
	<-holderDone
	require.NoError(t, <-otherErr)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("err=%v Request-Attempt headers=%q", err, headers)
	assert.LessOrEqual(t, len(headers), 3, "more requests than MaxAttempts(3)")
	for _, h := range headers {
		assert.NotEqual(t, "4/3", h)
	}
}

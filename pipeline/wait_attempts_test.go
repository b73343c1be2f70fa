package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// attemptLog records the attempts and retries a listener hears of.
type attemptLog struct {
	mu     sync.Mutex
	events []string
}

func (l *attemptLog) OnEvent(e resilience.Event) {
	if e.Kind != resilience.EventAttempt && e.Kind != resilience.EventRetry {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e.Kind.String()+" "+string(rune('0'+e.Attempt)))
}

func (l *attemptLog) got() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events...)
}

// With WaitWhenOpen, a call whose retries the breaker stopped waits for it
// and then goes on with the attempts it has left: MaxAttempts holds over
// the whole call, however the breaker lets it through again, and the
// attempts are numbered on (a call had sent 4 of MaxAttempts(3), numbered
// 1, then 1 to 3).
func TestWaitWhenOpenKeepsMaxAttemptsAcrossTheWait(t *testing.T) {
	dead := errors.New("dependency down")
	for _, tc := range []struct {
		name string
		back func(b *breaker.Breaker) // lets the call through again, in time
		want []string
	}{
		{
			name: "closed while it waits",
			back: func(b *breaker.Breaker) {
				time.Sleep(50 * time.Millisecond)
				b.SetMode(context.Background(), breaker.ForcedClosed, "test")
			},
			want: []string{"attempt 1", "retry 1", "attempt 2", "retry 2", "attempt 3"},
		},
		{
			name: "its own probe", // half-open after the open timeout: the call probes, once
			back: func(*breaker.Breaker) {},
			want: []string{"attempt 1", "attempt 2"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := breaker.New("wait-attempts", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second))
				log := &attemptLog{}
				p := pipeline.New(pipeline.WithBreaker(b), pipeline.WaitWhenOpen(),
					pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(0))),
					pipeline.WithTimeBudget(10*time.Second), pipeline.WithListener(log))
				sent := 0
				_, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
					sent++
					if sent == 1 { // another call opens the breaker meanwhile: the retry stage stops
						_ = b.Execute(context.Background(), func(context.Context) error { return dead })
						require.Equal(t, resilience.StateOpen, b.State())
						go tc.back(b)
					}
					return 0, dead
				})
				require.Error(t, err)
				assert.ErrorIs(t, err, dead)
				assert.Equal(t, len(tc.want)/2+1, sent, "attempts sent")
				assert.LessOrEqual(t, sent, 3, "no more than MaxAttempts")
				assert.Equal(t, tc.want, log.got())
				var re *retrypolicy.Error
				if errors.As(err, &re) {
					assert.Equal(t, sent, re.Attempts, "the error counts every attempt of the call")
				}
				synctest.Wait()
			})
		})
	}
}

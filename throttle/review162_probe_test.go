package throttle_test

// review162: the probe owed again after a take-back (review160) must not
// let more than one probe a bucket reach the dependency.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/throttle"
)

var r162Fail = errors.New("review162: 503")

// r162Failing returns a throttle (100 ms buckets) that a dead
// dependency's failures have made refuse nearly everything, once the
// bucket they were sent in is over: the next buckets have sent nothing,
// and are owed a probe each.
func r162Failing(t *testing.T) *throttle.Throttle {
	th := throttle.New(throttle.Window(time.Second))
	refused := 0
	for i := 0; i < 5000 && refused < 2000; i++ {
		tk, err := th.Admit()
		if err != nil {
			refused++
			continue
		}
		th.Done(tk, r162Fail)
	}
	p := th.RejectProbability()
	if p < 0.99 {
		t.Fatalf("reject probability %v: not failing", p)
	}
	time.Sleep(110 * time.Millisecond) // into a bucket in which nothing was sent
	return th
}

// A probe that reached the dependency and that the caller then gave up on
// (its deadline, a hang-up: Done with context.Canceled, as the pipeline
// reports an attempt that the caller's deadline ended) is taken back; the
// next attempt must not be a probe again in the same bucket, or a
// dependency that hangs gets one probe per caller's deadline instead of
// one per bucket.
func TestReview162CanceledProbeIsNoNewProbe(t *testing.T) {
	th := r162Failing(t)
	p := th.RejectProbability()
	start := time.Now()
	sent, tries := 0, 0
	for time.Since(start) < 250*time.Millisecond {
		tries++
		tk, err := th.Admit()
		if err != nil {
			time.Sleep(time.Millisecond)
			continue
		}
		sent++ // sent: the dependency holds it until the caller's deadline
		time.Sleep(2 * time.Millisecond)
		th.Done(tk, context.Canceled) // as the pipeline reports an attempt its caller's deadline ended
	}
	// At most 4 buckets seen (a probe each), plus the draw's share.
	allowed := 4 + int(3*float64(tries)*(1-p)) + 2
	t.Logf("%d tries, %d admitted (reached the dependency); p=%.4f, allowed %d", tries, sent, p, allowed)
	if sent > allowed {
		t.Errorf("%d attempts reached a failing dependency in 250 ms (100 ms buckets), want at most %d: each sent probe taken back by its caller's end makes another", sent, allowed)
	}
}

// The same through a pipeline: callers with a 5 ms deadline, a dependency
// that failed and now hangs.
func TestReview162PipelineProbeFloodOnHangingDependency(t *testing.T) {
	th := throttle.New(throttle.Window(time.Second)) // 100 ms buckets
	p := pipeline.New(pipeline.WithThrottle(th))
	var hang atomic.Bool
	var reached atomic.Int64
	op := func(ctx context.Context) (int, error) {
		if !hang.Load() {
			return 0, r162Fail
		}
		reached.Add(1)
		<-ctx.Done()
		return 0, ctx.Err()
	}
	for i := 0; i < 3000 && th.RejectProbability() < 0.99; i++ {
		_, _ = pipeline.Do(context.Background(), p, op)
	}
	for range 2000 { // refusals, which count as requests while failing
		_, _ = pipeline.Do(context.Background(), p, op)
	}
	prob := th.RejectProbability()
	if prob < 0.99 {
		t.Fatalf("p = %v", prob)
	}
	time.Sleep(110 * time.Millisecond) // into a bucket in which nothing was sent
	hang.Store(true)
	var tries atomic.Int64
	stop := time.Now().Add(250 * time.Millisecond)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				tries.Add(1)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
				_, err := pipeline.Do(ctx, p, op)
				cancel()
				if resilience.Classify(err) == resilience.ClassRejected {
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	allowed := int64(4 + 3*float64(tries.Load())*(1-prob) + 2)
	t.Logf("%d calls, %d reached the hanging dependency (p=%.4f), allowed %d", tries.Load(), reached.Load(), prob, allowed)
	if reached.Load() > allowed {
		t.Errorf("%d attempts reached a hanging dependency in 250 ms with 100 ms buckets, want at most %d (one probe a bucket)", reached.Load(), allowed)
	}
}

// Take-backs of attempts not sent (another gate refused them) race with
// probes that are sent: still at most one sent probe a bucket, and the
// probability stays in [0, 1].
func TestReview162TakeBackRaceOneProbe(t *testing.T) {
	th := r162Failing(t)
	prob := th.RejectProbability()
	var sent, tries atomic.Int64
	var inflight, maxInflight atomic.Int64
	stop := time.Now().Add(250 * time.Millisecond)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				tries.Add(1)
				tk, err := th.Admit()
				if err != nil {
					continue
				}
				if i%2 == 0 { // refused by the next gate: not sent
					th.Done(tk, resilience.Rejected(errors.New("limited")))
					continue
				}
				sent.Add(1)
				n := inflight.Add(1)
				for {
					m := maxInflight.Load()
					if n <= m || maxInflight.CompareAndSwap(m, n) {
						break
					}
				}
				time.Sleep(150 * time.Millisecond)
				inflight.Add(-1)
				th.Done(tk, r162Fail)
			}
		})
	}
	wg.Wait()
	if p := th.RejectProbability(); p < 0 || p > 1 {
		t.Errorf("p = %v", p)
	}
	prob = min(prob, th.RejectProbability())
	allowed := int64(4 + 3*float64(tries.Load())*(1-prob) + 2)
	t.Logf("%d tries, %d sent, max in flight %d, p=%.6f allowed %d", tries.Load(), sent.Load(), maxInflight.Load(), prob, allowed)
	if sent.Load() > allowed {
		t.Errorf("%d sent in 250 ms (100 ms buckets), want at most %d", sent.Load(), allowed)
	}
}

package chaos_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/chaos"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// callLog records when calls ended and whether they succeeded.
type callLog struct {
	mu    sync.Mutex
	times []time.Time
	ok    []bool
}

func (l *callLog) add(ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.times = append(l.times, time.Now())
	l.ok = append(l.ok, ok)
}

// run has clients call c every period until the end, offset by client.
func run(clients int, period, end time.Duration, call func() error, log *callLog, offered *atomic.Int64) {
	start := time.Now()
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * period / time.Duration(clients))
			for time.Since(start) < end {
				offered.Add(1)
				err := call()
				if log != nil {
					log.add(err == nil)
				}
				time.Sleep(period)
			}
		})
	}
	wg.Wait()
}

// outage takes backend down from downAt to upAt, from now.
func outage(backend *chaos.Backend, downAt, upAt time.Duration) {
	time.Sleep(downAt)
	backend.SetDown(true)
	time.Sleep(upAt - downAt)
	backend.SetDown(false)
}

func TestBreakerLimitsAnOutageToProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const openTimeout = 5 * time.Second
		start := time.Now()
		backend := chaos.New(100*time.Millisecond, nil)
		var openAt atomic.Int64
		b := breaker.New("backend", breaker.ConsecutiveFailures(5), breaker.OpenTimeout(openTimeout), breaker.HalfOpenRequests(1),
			breaker.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
				if e.Kind == resilience.EventStateChange && e.To == resilience.StateOpen && openAt.Load() == 0 {
					openAt.Store(int64(time.Since(start)))
				}
			})))
		client := httpclient.New(httpclient.Base(backend.Transport()), httpclient.WithPipeline(pipeline.New(
			pipeline.WithBreaker(b), pipeline.WithTimeBudget(2*time.Second),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(50*time.Millisecond))))))

		const downAt, upAt = 10 * time.Second, 40 * time.Second
		go outage(backend, downAt, upAt)
		log := &callLog{}
		run(50, 100*time.Millisecond, 60*time.Second, func() error { return client.GetJSON(t.Context(), "http://backend/", nil) }, log, new(atomic.Int64))

		opened := time.Duration(openAt.Load())
		require.NotZero(t, opened, "the breaker opened")
		assert.Less(t, opened, downAt+time.Second)
		windows := int((upAt - opened + openTimeout - 1) / openTimeout)
		probes := backend.ReceivedBetween(start.Add(opened+100*time.Millisecond), start.Add(upAt))
		assert.LessOrEqual(t, probes, windows, "at most one probe per OpenTimeout while down")
		assert.GreaterOrEqual(t, probes, windows-1, "and it does keep probing")

		var firstOK time.Duration
		for i, at := range log.times {
			if d := at.Sub(start); d >= upAt && log.ok[i] && (firstOK == 0 || d < firstOK) {
				firstOK = d
			}
		}
		require.NotZero(t, firstOK)
		assert.LessOrEqual(t, firstOK, upAt+openTimeout+100*time.Millisecond, "recovered within OpenTimeout and one probe")
		for i, at := range log.times {
			if at.Sub(start) > firstOK+time.Second {
				require.True(t, log.ok[i], "every call succeeds after recovery")
			}
		}
		assert.Equal(t, resilience.StateClosed, b.State())
	})
}

// outageLoad runs 200 clients, one call a second each, through a 10 s
// outage, and returns the requests the backend received during it and
// the calls offered in it.
func outageLoad(t *testing.T, options func(backend *chaos.Backend) []httpclient.Option) (received, offered int) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		backend := chaos.New(100*time.Millisecond, nil)
		client := httpclient.New(options(backend)...)
		const downAt, upAt = 10 * time.Second, 20 * time.Second
		go outage(backend, downAt, upAt)
		var all, during atomic.Int64
		run(200, time.Second, 30*time.Second, func() error {
			if d := time.Since(start); d >= downAt && d < upAt {
				during.Add(1)
			}
			return client.GetJSON(t.Context(), "http://backend/", nil)
		}, nil, &all)
		received = backend.ReceivedBetween(start.Add(downAt), start.Add(upAt))
		offered = int(during.Load())
	})
	return received, offered
}

func TestOutageLoadPipelineVersusNaiveRetry(t *testing.T) {
	pipelineReceived, offered := outageLoad(t, func(backend *chaos.Backend) []httpclient.Option {
		return []httpclient.Option{
			httpclient.Base(backend.Transport()),
			httpclient.WithPipeline(pipeline.New(
				pipeline.WithBreaker(breaker.New("backend", breaker.ConsecutiveFailures(5), breaker.OpenTimeout(5*time.Second))),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(4))),
				pipeline.WithTimeBudget(2*time.Second),
			)),
		}
	})
	naiveReceived, naiveOffered := outageLoad(t, func(backend *chaos.Backend) []httpclient.Option {
		return []httpclient.Option{
			httpclient.Base(backend.Transport()),
			httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(5), retrypolicy.BaseDelay(0))))),
		}
	})
	t.Logf("during a 10 s outage: pipeline %d requests for %d calls offered; naive immediate retry %d for %d",
		pipelineReceived, offered, naiveReceived, naiveOffered)
	require.InDelta(t, 2000, offered, 20)
	assert.LessOrEqual(t, float64(pipelineReceived), 1.2*float64(offered))
	assert.GreaterOrEqual(t, float64(naiveReceived), 3*float64(naiveOffered), "naive retry multiplies the load")
	assert.Greater(t, naiveReceived, 10*pipelineReceived)
}

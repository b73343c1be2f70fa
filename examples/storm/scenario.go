package main

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// A scenario is a backend, what goes wrong with it and when, and the calls
// offered to it: rate calls a second, evenly spaced, open loop (each
// starts on time whatever became of the others, as independent users'
// would), from 0 until until. Every call has the caller's deadline
// (deadline); strategies that can cap an attempt cap it at
// attemptTimeout.
//
// The backend is a pool of workers per host, each serving one request at
// a time from a FIFO queue, as a thread pool behind a socket does. A
// request whose caller has given up still takes a worker when its turn
// comes: the server cannot tell. A request that finds the queue full, or
// the backend down, is answered 503 at once. Every request crosses a
// network of netDelay first.
type scenario struct {
	key, name string
	about     string // what the scenario does, in a line or two

	rate  int           // calls offered a second
	until time.Duration // calls start until then

	hosts   int                              // hosts, each with its own workers and queue; a request goes to one at random
	workers int                              // per host
	queue   int                              // requests a host queues at most; more get 503
	service func(r *rand.Rand) time.Duration // a request's service time at full speed

	down     func(t time.Duration) bool    // every request gets 503 at once
	deadHost bool                          // host 0 refuses every connection, all along
	errRate  func(t time.Duration) float64 // share of requests answered 503 at once, at random
	speed    func(t time.Duration) float64 // the workers' speed, 1 = full, at which a request in progress goes (serviceFrom); nil: always 1

	// healthy lists the spans of time when the backend had no fault and
	// the capacity for the offered calls; recovered is when the last
	// fault ended (0: no fault ends in the run).
	healthy   []span
	recovered time.Duration
	// heavy is whether the goal for the backend requests is the strict
	// one (<= 0.5x the best plain retry's) rather than <= 1.1x.
	heavy bool

	deadline, attemptTimeout time.Duration
}

// span is [from, to) from the start of a run.
type span struct{ from, to time.Duration }

const forever = time.Duration(math.MaxInt64)

// healthyThrough says whether the backend was healthy from s to e.
func (sc *scenario) healthyThrough(s, e time.Duration) bool {
	for _, h := range sc.healthy {
		if s >= h.from && e < h.to {
			return true
		}
	}
	return false
}

const (
	netDelay       = time.Millisecond
	callDeadline   = time.Second
	attemptTimeout = 250 * time.Millisecond
)

// uniformService is 5 to 15 ms, 10 ms on average.
func uniformService(r *rand.Rand) time.Duration {
	return 5*time.Millisecond + time.Duration(r.Int64N(int64(10*time.Millisecond)+1))
}

// heavyTailService is log-normal with a median of 10 ms and a p99 of
// 100 ms (sigma = ln 10 / 2.326), a mean of 16.4 ms.
func heavyTailService(r *rand.Rand) time.Duration {
	const sigma = 2.302585092994046 / 2.3263478740408408
	return time.Duration(float64(10*time.Millisecond) * math.Exp(sigma*r.NormFloat64()))
}

func between(from, to time.Duration) func(time.Duration) bool {
	return func(t time.Duration) bool { return t >= from && t < to }
}

// flapping is down for flapDown of every flapPeriod from flapFrom to
// flapTo.
const (
	flapFrom, flapTo     = time.Second, 7 * time.Second
	flapPeriod, flapDown = 300 * time.Millisecond, 60 * time.Millisecond
)

func flapDownAt(t time.Duration) bool {
	return t >= flapFrom && t < flapTo && (t-flapFrom)%flapPeriod < flapDown
}

func flapHealthy() []span {
	s := []span{{0, flapFrom}}
	for t := flapFrom; t < flapTo; t += flapPeriod {
		s = append(s, span{t + flapDown, t + flapPeriod})
	}
	return append(s, span{flapTo, forever})
}

// The slow recovery: down from 1 s to 3 s, then the workers' speed ramps
// from 5% to full over 2 s; they cover the offered calls (400 a second of
// 800) from half speed, 4 s. A request in progress speeds up with them: a
// probe served from 3 s takes 100 to 224 ms, not the 100 to 300 ms of 5%
// all along, whose spread decided, seed by seed, when a breaker closed and
// how many requests the ramp got.
func slowSpeed(t time.Duration) float64 {
	if t < 3*time.Second {
		return 1
	}
	return min(max(float64(t-3*time.Second)/float64(2*time.Second), 0.05), 1)
}

// scenarios are the seven scenarios of issue #24, in the order the tables
// print them.
var scenarios = []*scenario{
	{
		key: "outage", name: "Full outage, 5 s",
		about: "Every request gets 503 from 1 s to 6 s, then the backend is healthy at once.",
		rate:  400, until: 9 * time.Second, hosts: 1, workers: 8, queue: 50, service: uniformService,
		down:    between(time.Second, 6*time.Second),
		healthy: []span{{0, time.Second}, {6 * time.Second, forever}}, recovered: 6 * time.Second, heavy: true,
	},
	{
		key: "brownout", name: "Brownout",
		about: "30% of requests get 503 at random from 1 s to 5 s; the backend is not overloaded (50% busy).",
		rate:  400, until: 8 * time.Second, hosts: 1, workers: 8, queue: 50, service: uniformService,
		errRate: func(t time.Duration) float64 {
			if t >= time.Second && t < 5*time.Second {
				return 0.3
			}
			return 0
		},
		healthy: []span{{0, time.Second}, {5 * time.Second, forever}}, recovered: 5 * time.Second,
	},
	{
		key: "metastable", name: "Metastable failure",
		about: "5 workers, an unbounded queue, offered 80% of capacity; the workers run at half speed from 2 s to 4 s.",
		rate:  400, until: 10 * time.Second, hosts: 1, workers: 5, queue: 1 << 17, service: uniformService,
		speed: func(t time.Duration) float64 {
			if t >= 2*time.Second && t < 4*time.Second {
				return 0.5
			}
			return 1
		},
		healthy: []span{{0, 2 * time.Second}, {4 * time.Second, forever}}, recovered: 4 * time.Second, heavy: true,
	},
	{
		key: "heavytail", name: "Heavy tail",
		about: "Service time log-normal, median 10 ms, p99 100 ms (10x); no fault; 65% busy.",
		rate:  400, until: 6 * time.Second, hosts: 1, workers: 10, queue: 200, service: heavyTailService,
		healthy: []span{{0, forever}},
	},
	{
		key: "deadhost", name: "One of three hosts dead",
		about: "Each request goes to one of three hosts at random; one refuses connections all along; the other two have the capacity for all the calls, retries included (67% busy).",
		rate:  400, until: 6 * time.Second, hosts: 3, workers: 3, queue: 50, service: uniformService, deadHost: true,
		healthy: []span{{0, forever}},
	},
	{
		key: "flapping", name: "Flapping",
		about: "Every request gets 503 for 60 ms of every 300 ms from 1 s to 7 s.",
		rate:  400, until: 9 * time.Second, hosts: 1, workers: 8, queue: 50, service: uniformService,
		down: flapDownAt, healthy: flapHealthy(), recovered: flapTo,
	},
	{
		key: "slowrecovery", name: "Slow recovery",
		about: "Every request gets 503 from 1 s to 3 s; then capacity comes back linearly over 2 s, covering the offered calls from 4 s.",
		rate:  400, until: 8 * time.Second, hosts: 1, workers: 8, queue: 50, service: uniformService,
		down: between(time.Second, 3*time.Second), speed: slowSpeed,
		healthy: []span{{0, time.Second}, {4 * time.Second, forever}}, recovered: 4 * time.Second, heavy: true,
	},
}

func init() {
	for _, sc := range scenarios {
		sc.deadline, sc.attemptTimeout = callDeadline, attemptTimeout
	}
}

// scenarioByKey returns the scenario named key, or nil.
func scenarioByKey(key string) *scenario {
	for _, sc := range scenarios {
		if sc.key == key {
			return sc
		}
	}
	return nil
}

// The backend's errors. Both are transient: retried by every strategy,
// failures for every breaker; grpc-go's would be UNAVAILABLE.
var (
	errUnavailable = errors.New("503 service unavailable")
	errRefused     = errors.New("connection refused")
)

// backend is a scenario's fake dependency. Its methods are safe for
// concurrent use.
type backend struct {
	sc       *scenario
	start    time.Time
	hosts    []*host
	requests *counter // per bucket
	served   atomic.Int64
	wasted   atomic.Int64 // served after the caller gave up
}

type host struct {
	queue chan *job
	stop  chan struct{}
	wg    sync.WaitGroup
}

// job is one request in a queue; done is closed when it has been served.
type job struct {
	ctx     context.Context
	service time.Duration
	done    chan struct{}
}

func newBackend(sc *scenario, start time.Time) *backend {
	b := &backend{sc: sc, start: start, requests: newCounter(start)}
	for range sc.hosts {
		h := &host{queue: make(chan *job, sc.queue), stop: make(chan struct{})}
		for range sc.workers {
			h.wg.Go(func() { b.work(h) })
		}
		b.hosts = append(b.hosts, h)
	}
	return b
}

func (b *backend) work(h *host) {
	for {
		select {
		case <-h.stop:
			return
		case j := <-h.queue:
			time.Sleep(b.sc.serviceFrom(time.Since(b.start), j.service))
			b.served.Add(1)
			if j.ctx.Err() != nil {
				b.wasted.Add(1)
			}
			close(j.done)
		}
	}
}

// speedStep is the slice of time over which serviceFrom takes the workers'
// speed as constant.
const speedStep = time.Millisecond

// serviceFrom returns how long a request whose service time at full speed
// is work takes when a worker starts it at t: the work goes at the speed
// of the moment, so that capacity coming back speeds up the requests in
// progress too, rather than only those started after. A speed under
// minSpeed (0, negative, NaN: a scenario's mistake) counts as minSpeed, so
// that a request ends.
func (sc *scenario) serviceFrom(t, work time.Duration) time.Duration {
	if sc.speed == nil {
		return work
	}
	left := float64(work)
	for d := time.Duration(0); ; d += speedStep {
		v := sc.speed(t + d)
		if !(v >= minSpeed) {
			v = minSpeed
		}
		if v*float64(speedStep) >= left {
			return d + time.Duration(left/v)
		}
		left -= v * float64(speedStep)
	}
}

// minSpeed is the slowest the workers go: the slow recovery starts at 0.05.
const minSpeed = 0.01

// serve is one request; r decides its fate (its host, whether it is one
// of the brownout's 503s, its service time), so that a request's fate
// does not depend on the order in which goroutines run.
func (b *backend) serve(ctx context.Context, r *rand.Rand) error {
	b.requests.add(time.Now())
	hostIndex := r.IntN(len(b.hosts))
	fail := r.Float64()
	service := b.sc.service(r)
	if err := sleepCtx(ctx, netDelay); err != nil {
		return err
	}
	t := time.Since(b.start)
	switch {
	case b.sc.deadHost && hostIndex == 0:
		return errRefused
	case b.sc.down != nil && b.sc.down(t), b.sc.errRate != nil && fail < b.sc.errRate(t):
		return errUnavailable
	}
	j := &job{ctx: ctx, service: service, done: make(chan struct{})}
	select {
	case b.hosts[hostIndex].queue <- j:
	default:
		return errUnavailable
	}
	select {
	case <-j.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close stops the workers, leaving what is queued.
func (b *backend) close() {
	for _, h := range b.hosts {
		close(h.stop)
		h.wg.Wait()
	}
}

// sleepCtx sleeps for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

package registry

import (
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// Snapshot is the live state of everything a registry holds at one
// moment.
type Snapshot struct {
	At time.Time
	// Interval is the span of a series' point, and of the rates while
	// snapshots come at least that often; Points how many points a series
	// keeps.
	Interval  time.Duration
	Points    int
	Breakers  []BreakerState  // sorted by name
	Pipelines []PipelineState // sorted by name
}

// BreakerState is a breaker's state in a [Snapshot].
type BreakerState struct {
	breaker.Snapshot
	// Pipelines are the names of the registered pipelines built on it.
	Pipelines []string
	// Series are its pipelines' successes, failures and rejections per
	// interval.
	Series Series
}

// PipelineState is a pipeline's state in a [Snapshot]. Rates are over the
// time since the series took its previous point: the last interval while
// someone looks (a dashboard page open takes a snapshot every interval),
// the whole pause after nobody has, whose counts its points then share.
// Totals are since it was registered.
type PipelineState struct {
	Name    string
	Breaker string // its breaker's name, "" if none
	// CallsPerSec, AttemptsPerSec and HedgesPerSec are rates since the
	// previous point; RetryRatio is retries per call over that time.
	// Attempts are the retry stage's: a hedged group of attempts counts
	// as one, its hedges in Hedged, as they are sent (resilience.EventHedged:
	// one reported as its race was decided is then not sent, and counts).
	CallsPerSec, AttemptsPerSec, HedgesPerSec, RetryRatio float64
	// QuotaLeft is how many retries its retry quota allows now, -1 without
	// a quota.
	QuotaLeft int
	// RejectProbability is its throttle's, -1 without a throttle.
	RejectProbability float64
	// InFlight and Limit are its concurrency limit's, Limit -1 without one;
	// LimitWaiting are the attempts queued for a slot.
	InFlight, Limit, LimitWaiting int
	// Waiting are the calls waiting for its breaker (WaitWhenOpen), or that
	// waited and are not over.
	Waiting int
	// P50 and P99 are of its latest sampled calls' durations.
	P50, P99 time.Duration
	// Totals since it was registered.
	Calls, Attempts, Successes, Failures, Retries, Hedged uint64
	Rejected, Throttled, Limited, Waited                  uint64
	Series                                                Series
}

// Snapshot returns the live state of every breaker and pipeline
// registered, and takes a point of their series if an interval has passed
// since the last. It is safe for concurrent use.
func (r *Registry) Snapshot() Snapshot {
	r.smu.Lock()
	defer r.smu.Unlock()
	// The entries are copied under the registry's lock, and read after:
	// registering (a breaker group's first call to a host may) waits for
	// the copy, not for the whole snapshot.
	r.mu.Lock()
	pipes, breakers := maps.Clone(r.pipelines), maps.Clone(r.breakers)
	r.mu.Unlock()
	now := time.Now()
	s := Snapshot{At: now, Interval: r.cfg.interval, Points: r.cfg.points}
	elapsed := now.Sub(r.sampled)
	// The points since the last: the counts of intervals nobody looked at
	// are spread over them.
	points := int(min(elapsed/r.cfg.interval, time.Duration(r.cfg.points)))
	point := points > 0
	if point {
		r.sampled = now
	}
	perBreaker := map[string]*sums{}
	byBreaker := map[string][]string{} // the pipelines built on each
	for name, e := range pipes {
		p := e.p.Value()
		if p == nil {
			continue
		}
		if e.breaker != "" {
			byBreaker[e.breaker] = append(byBreaker[e.breaker], name)
		}
		t := e.stats.totals()
		if point {
			d := diff(t, e.last)
			took := e.series.takeBack(since(e.last.Failures, t.Failures))
			succ, fail, rej := shareOf(d.Successes, points), shareOf(d.Failures, points), shareOf(d.Rejected+d.Throttled+d.Limited, points)
			e.series.spread(points, succ, fail, rej)
			if e.breaker != "" {
				b := perBreaker[e.breaker]
				if b == nil {
					b = &sums{}
					perBreaker[e.breaker] = b
				}
				b.add(succ, fail, rej, took)
			}
			e.rate, e.span = d, now.Sub(e.lastAt)
			e.last, e.lastAt = t, now
		}
		s.Pipelines = append(s.Pipelines, pipelineState(name, p, e, t))
	}
	for name, e := range breakers {
		b := e.b.Value()
		if b == nil {
			continue
		}
		bs := BreakerState{Snapshot: b.Snapshot()}
		if bs.Closed {
			remove(r, r.breakers, name, func(o *breakerEntry) bool { return o == e }) // unregistered once closed
			continue
		}
		if point {
			if c := perBreaker[name]; c != nil {
				e.series.takeAt(c.took)
				e.series.spread(points, c.succ, c.fail, c.rej)
			} else {
				e.series.spread(points, share{}, share{}, share{})
			}
		}
		bs.Series = e.series.export()
		bs.Pipelines = byBreaker[name]
		slices.Sort(bs.Pipelines)
		s.Breakers = append(s.Breakers, bs)
	}
	slices.SortFunc(s.Breakers, func(a, b BreakerState) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(s.Pipelines, func(a, b PipelineState) int { return strings.Compare(a.Name, b.Name) })
	return s
}

// sums are the points a breaker's series takes: the sums of its
// pipelines' new points, and of the failures they took back from each
// point before them, the newest first.
type sums struct {
	succ, fail, rej share
	took            []uint64
}

// add adds a pipeline's new points, and what it took back from each point.
func (s *sums) add(succ, fail, rej share, took []uint64) {
	s.succ.add(succ)
	s.fail.add(fail)
	s.rej.add(rej)
	for i, k := range took {
		if i == len(s.took) {
			s.took = append(s.took, 0)
		}
		s.took[i] += k
	}
}

func diff(now, then totals) totals {
	return totals{
		Calls: now.Calls - then.Calls, Attempts: now.Attempts - then.Attempts, Successes: now.Successes - then.Successes,
		Failures: since(now.Failures, then.Failures), Retries: now.Retries - then.Retries, Hedged: now.Hedged - then.Hedged,
		Rejected: now.Rejected - then.Rejected, Throttled: now.Throttled - then.Throttled, Limited: now.Limited - then.Limited,
		Waited: now.Waited - then.Waited,
	}
}

// since is now - then, or 0 if now is less: the failures are told from
// the attempts' counts (see stats.totals), and a call's first attempt
// that failed counts as one until its retry succeeds, which takes it back
// (from the series too: series.takeBack).
func since(now, then uint64) uint64 {
	if now < then {
		return 0
	}
	return now - then
}

// pipelineState reads a pipeline's figures: its stages' live state and its
// listener's counts; the rates are the last point's.
func pipelineState(name string, p *pipeline.Pipeline, e *pipelineEntry, t totals) PipelineState {
	ps := PipelineState{
		Name: name, Breaker: e.breaker, QuotaLeft: -1, RejectProbability: -1, Limit: -1,
		Calls: t.Calls, Attempts: t.Attempts, Successes: t.Successes, Failures: t.Failures, Retries: t.Retries,
		Hedged: t.Hedged, Rejected: t.Rejected, Throttled: t.Throttled, Limited: t.Limited, Waited: t.Waited,
		Waiting: p.Waiting(),
		Series:  e.series.export(),
	}
	ps.P50, ps.P99 = e.stats.quantiles()
	{
		st := p.Stages()
		if q := st.Retry.Quota(); q != nil {
			if n := q.Available(); n != math.MaxInt {
				ps.QuotaLeft = n
			}
		}
		if st.Throttle != nil {
			ps.RejectProbability = st.Throttle.RejectProbability()
		}
		if st.Limit != nil {
			ps.InFlight, ps.Limit, ps.LimitWaiting = st.Limit.InFlight(), st.Limit.Limit(), st.Limit.Waiting()
		}
	}
	if sec := e.span.Seconds(); sec > 0 {
		ps.CallsPerSec = float64(e.rate.Calls) / sec
		ps.AttemptsPerSec = float64(e.rate.Attempts) / sec
		ps.HedgesPerSec = float64(e.rate.Hedged) / sec
	}
	if e.rate.Calls > 0 {
		ps.RetryRatio = float64(e.rate.Retries) / float64(e.rate.Calls)
	}
	return ps
}

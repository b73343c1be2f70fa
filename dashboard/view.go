package dashboard

import (
	"time"

	"github.com/resiliencekit/resiliencekit/registry"
)

// The JSON of api/state and api/events: the dashboard's contract, apart
// from the Go types it is made from. Durations are in milliseconds.
type stateView struct {
	At         time.Time      `json:"at"`
	IntervalMS int64          `json:"interval_ms"`
	Points     int            `json:"points"`
	Breakers   []breakerView  `json:"breakers"`
	Pipelines  []pipelineView `json:"pipelines"`
}

type breakerView struct {
	Name        string           `json:"name"`
	State       string           `json:"state"`
	Own         string           `json:"own"`
	Mode        string           `json:"mode"`
	ModeBy      string           `json:"mode_by,omitempty"`
	ModeAt      *time.Time       `json:"mode_at,omitempty"`
	Shared      bool             `json:"shared"`
	Fleet       string           `json:"fleet,omitempty"`
	Generation  uint64           `json:"generation,omitempty"`
	Requests    uint32           `json:"requests"`
	Successes   uint32           `json:"successes"`
	Failures    uint32           `json:"failures"`
	FailureRate float64          `json:"failure_rate"`
	NextProbeMS int64            `json:"next_probe_ms"`
	Transitions []transitionView `json:"transitions"`
	Pipelines   []string         `json:"pipelines"`
	Series      seriesView       `json:"series"`
}

type transitionView struct {
	At     time.Time `json:"at"`
	From   string    `json:"from"`
	To     string    `json:"to"`
	Fleet  bool      `json:"fleet,omitempty"`
	Reason string    `json:"reason"`
}

type pipelineView struct {
	Name              string     `json:"name"`
	Breaker           string     `json:"breaker,omitempty"`
	CallsPerSec       float64    `json:"calls_per_sec"`
	AttemptsPerSec    float64    `json:"attempts_per_sec"`
	RetryRatio        float64    `json:"retry_ratio"`
	HedgesPerSec      float64    `json:"hedges_per_sec"`
	QuotaLeft         int        `json:"quota_left"`
	RejectProbability float64    `json:"reject_probability"`
	InFlight          int        `json:"in_flight"`
	Limit             int        `json:"limit"`
	LimitWaiting      int        `json:"limit_waiting"`
	Waiting           int        `json:"waiting"`
	P50MS             float64    `json:"p50_ms"`
	P99MS             float64    `json:"p99_ms"`
	Calls             uint64     `json:"calls"`
	Successes         uint64     `json:"successes"`
	Failures          uint64     `json:"failures"`
	Rejected          uint64     `json:"rejected"`
	Throttled         uint64     `json:"throttled"`
	Limited           uint64     `json:"limited"`
	Series            seriesView `json:"series"`
}

// seriesView leaves out a series of zeros: most of 500 breakers are idle.
type seriesView struct {
	Successes  []uint64 `json:"successes,omitempty"`
	Failures   []uint64 `json:"failures,omitempty"`
	Rejections []uint64 `json:"rejections,omitempty"`
}

func view(s registry.Snapshot) stateView {
	v := stateView{At: s.At, IntervalMS: s.Interval.Milliseconds(), Points: s.Points, Breakers: []breakerView{}, Pipelines: []pipelineView{}}
	for _, b := range s.Breakers {
		bv := breakerView{
			Name: b.Name, State: b.State.String(), Own: b.Own.String(), Mode: b.Mode.Mode.String(), ModeBy: b.Mode.By,
			Shared: b.Shared, Generation: b.Generation,
			Requests: b.Counts.Requests, Successes: b.Counts.TotalSuccesses, Failures: b.Counts.TotalFailures,
			FailureRate: b.FailureRate, NextProbeMS: b.NextProbe.Milliseconds(),
			Transitions: []transitionView{}, Pipelines: b.Pipelines, Series: seriesOf(b.Series),
		}
		if !b.Mode.At.IsZero() {
			at := b.Mode.At
			bv.ModeAt = &at
		}
		if b.Shared {
			bv.Fleet = b.Fleet.String()
		}
		if bv.Pipelines == nil {
			bv.Pipelines = []string{}
		}
		for _, t := range b.Transitions {
			bv.Transitions = append(bv.Transitions, transitionView{At: t.At, From: t.From.String(), To: t.To.String(), Fleet: t.Fleet, Reason: t.Reason})
		}
		v.Breakers = append(v.Breakers, bv)
	}
	for _, p := range s.Pipelines {
		v.Pipelines = append(v.Pipelines, pipelineView{
			Name: p.Name, Breaker: p.Breaker, CallsPerSec: p.CallsPerSec, AttemptsPerSec: p.AttemptsPerSec,
			RetryRatio: p.RetryRatio, HedgesPerSec: p.HedgesPerSec, QuotaLeft: p.QuotaLeft,
			RejectProbability: p.RejectProbability, InFlight: p.InFlight, Limit: p.Limit, LimitWaiting: p.LimitWaiting,
			Waiting: p.Waiting, P50MS: ms(p.P50), P99MS: ms(p.P99), Calls: p.Calls, Successes: p.Successes,
			Failures: p.Failures, Rejected: p.Rejected, Throttled: p.Throttled, Limited: p.Limited, Series: seriesOf(p.Series),
		})
	}
	return v
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func seriesOf(s registry.Series) seriesView {
	return seriesView{Successes: nonZero(s.Successes), Failures: nonZero(s.Failures), Rejections: nonZero(s.Rejections)}
}

func nonZero(xs []uint64) []uint64 {
	for _, x := range xs {
		if x != 0 {
			return xs
		}
	}
	return nil
}

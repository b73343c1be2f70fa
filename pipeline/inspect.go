package pipeline

import (
	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// Stages are the stages a pipeline was built with, for code that reads
// their live state (a registry, a dashboard): each is nil if the pipeline
// has none. They are the values given to the options, shared with every
// other pipeline given them.
type Stages struct {
	Name     string // WithName's, or the breaker's
	Breaker  *breaker.Breaker
	Retry    *retrypolicy.Policy
	Throttle *throttle.Throttle
	Limit    *limit.Limiter
	Hedging  *hedge.Policy
	// WaitWhenOpen says calls that find the breaker open wait for it.
	WaitWhenOpen bool
}

// Stages returns the stages of p. It is safe for concurrent use; a nil p
// has none.
func (p *Pipeline) Stages() Stages {
	if p == nil {
		return Stages{}
	}
	c := &p.cfg
	s := Stages{Name: c.name, Breaker: c.breaker, Retry: c.givenRetry, Throttle: c.throttle, Limit: c.limit, Hedging: c.hedge}
	s.WaitWhenOpen = c.waitOpen
	return s
}

// Waiting returns how many calls through p wait for its breaker
// (WaitWhenOpen) or have waited and are not over yet. It takes no lock.
func (p *Pipeline) Waiting() int {
	if p == nil || p.cfg.pacer == nil {
		return 0
	}
	return int(p.cfg.pacer.backlog.Load())
}

package registry

import (
	"fmt"
	"time"
)

// Option configures a [Registry].
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	interval time.Duration
	points   int
}

// MaxPoints is the most points a series keeps ([Interval]): each
// registered pipeline and breaker keeps a few series of that many, made as
// it is registered.
const MaxPoints = 100_000

// Interval sets how often the series behind sparklines take a point, and
// the span of the rates (calls/s) while someone looks, and how many points
// they keep. Default
// 1 s and 300 points: the last five minutes. It panics if d is not
// positive or points is not from 1 to [MaxPoints].
func Interval(d time.Duration, points int) Option {
	if d <= 0 || points < 1 || points > MaxPoints {
		panic(fmt.Sprintf("registry: Interval(%v, %d): d must be more than 0 and points from 1 to %d", d, points, MaxPoints))
	}
	return optionFunc(func(c *config) { c.interval, c.points = d, points })
}

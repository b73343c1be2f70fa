// Package hook connects packages of this module without widening their
// public API.
package hook

import "github.com/resiliencekit/resiliencekit/resilience"

// AddBreakerListener adds l to the listeners of a *breaker.Breaker, unless
// it has l already. Package breaker sets it; package pipeline calls it so
// that one listener given to a pipeline also hears its breaker.
var AddBreakerListener func(b any, l resilience.Listener)

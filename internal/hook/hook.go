// Package hook connects packages of this module without widening their
// public API.
package hook

import "github.com/resiliencekit/resiliencekit/resilience"

// ClaimBreakerEvents makes l the listener of a *breaker.Breaker that has
// none yet, and does nothing if it has one. Package breaker sets it;
// package pipeline calls it so that the listener of the first pipeline
// built on a breaker also hears the breaker, with no listener added twice
// and nothing growing however many pipelines are built.
var ClaimBreakerEvents func(b any, l resilience.Listener)

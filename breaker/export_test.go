package breaker

// GobreakerTiming turns b's cadence and probation off (see core), for the
// tests that hold the rest of its model to gobreaker's.
func GobreakerTiming(b *Breaker) *Breaker {
	b.cb.gobreakerTiming = true
	return b
}

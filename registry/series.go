package registry

// series keeps the last points of successes, failures and rejections, one
// a sampling interval, oldest first; under the registry's lock.
type series struct {
	succ, fail, rej []uint64
}

func newSeries(points int) series {
	return series{succ: make([]uint64, 0, points), fail: make([]uint64, 0, points), rej: make([]uint64, 0, points)}
}

// spread adds k points (at most the capacity) that share the counts
// evenly, the remainders in the last, dropping the oldest beyond the
// capacity.
func (s *series) spread(k int, succ, fail, rej uint64) {
	s.succ = spreadOne(s.succ, k, succ)
	s.fail = spreadOne(s.fail, k, fail)
	s.rej = spreadOne(s.rej, k, rej)
}

// takeBack takes n failures off the newest points that have them: a
// call's failed attempt counted as its failure until a retry succeeded.
// The failure leaves the point it was counted in, or a later one of
// another call's (failures are counted, not which call's they are), so
// that the points add up to the failures; what has left the series stays
// out of it.
func (s *series) takeBack(n uint64) {
	for i := len(s.fail) - 1; i >= 0 && n > 0; i-- {
		k := min(s.fail[i], n)
		s.fail[i] -= k
		n -= k
	}
}

func spreadOne(xs []uint64, k int, total uint64) []uint64 {
	if k < 1 {
		return xs
	}
	n := uint64(k)
	k = min(k, cap(xs))                                // the points kept
	xs = xs[:copy(xs, xs[max(len(xs)+k-cap(xs), 0):])] // the oldest out, in one move
	for range k - 1 {
		xs = append(xs, total/n)
	}
	return append(xs, total/n+total%n)
}

// Series are counts per sampling interval, oldest first, for sparklines.
type Series struct {
	Successes, Failures, Rejections []uint64
}

func (s *series) export() Series {
	return Series{Successes: clone(s.succ), Failures: clone(s.fail), Rejections: clone(s.rej)}
}

func clone(xs []uint64) []uint64 { return append([]uint64(nil), xs...) }

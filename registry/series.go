package registry

// series keeps the last points of successes, failures and rejections, one
// a sampling interval, oldest first; under the registry's lock.
type series struct {
	succ, fail, rej []uint64
}

func newSeries(points int) series {
	return series{succ: make([]uint64, 0, points), fail: make([]uint64, 0, points), rej: make([]uint64, 0, points)}
}

// share is a count spread over k new points: each of them but the last
// has each, the last last.
type share struct{ each, last uint64 }

// shareOf spreads total evenly over k points, the remainder in the last.
func shareOf(total uint64, k int) share {
	n := uint64(max(k, 1))
	return share{total / n, total/n + total%n}
}

// add adds q to s point by point: a breaker's series is the sum of its
// pipelines'.
func (s *share) add(q share) { s.each, s.last = s.each+q.each, s.last+q.last }

// spread adds k points (at most the capacity) of the shares, dropping the
// oldest beyond the capacity.
func (s *series) spread(k int, succ, fail, rej share) {
	s.succ = spreadOne(s.succ, k, succ)
	s.fail = spreadOne(s.fail, k, fail)
	s.rej = spreadOne(s.rej, k, rej)
}

// takeBack takes n failures off the newest points that have them: a
// call's failed attempt counted as its failure until a retry succeeded.
// Failures are counted, not which call's they are: the failure leaves
// the newest point that has one, its own or, up to a call's length later,
// another call's, so that the points add up to the failures; one that has
// left the series stays out of it. It returns how many it took from each
// point, the newest first, for the breaker's series (takeAt).
func (s *series) takeBack(n uint64) (took []uint64) {
	for i := len(s.fail) - 1; i >= 0 && n > 0; i-- {
		k := min(s.fail[i], n)
		s.fail[i] -= k
		n -= k
		took = append(took, k)
	}
	return took
}

// takeAt takes took[i] failures off the i-th newest point, as far as it
// has them.
func (s *series) takeAt(took []uint64) {
	for i, k := range took {
		j := len(s.fail) - 1 - i
		if j < 0 {
			return
		}
		s.fail[j] -= min(s.fail[j], k)
	}
}

func spreadOne(xs []uint64, k int, p share) []uint64 {
	if k < 1 {
		return xs
	}
	k = min(k, cap(xs))                                // the points kept
	xs = xs[:copy(xs, xs[max(len(xs)+k-cap(xs), 0):])] // the oldest out, in one move
	for range k - 1 {
		xs = append(xs, p.each)
	}
	return append(xs, p.last)
}

// Series are counts per sampling interval, oldest first, for sparklines.
type Series struct {
	Successes, Failures, Rejections []uint64
}

func (s *series) export() Series {
	return Series{Successes: clone(s.succ), Failures: clone(s.fail), Rejections: clone(s.rej)}
}

func clone(xs []uint64) []uint64 { return append([]uint64(nil), xs...) }

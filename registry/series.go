package registry

// series keeps the last points of successes, failures and rejections, one
// a sampling interval, oldest first; under the registry's lock.
type series struct {
	succ, fail, rej []uint64
}

func newSeries(points int) series {
	return series{succ: make([]uint64, 0, points), fail: make([]uint64, 0, points), rej: make([]uint64, 0, points)}
}

// push adds a point, dropping the oldest beyond the capacity.
func (s *series) push(succ, fail, rej uint64) {
	s.succ = pushOne(s.succ, succ)
	s.fail = pushOne(s.fail, fail)
	s.rej = pushOne(s.rej, rej)
}

// spread adds k points that share the counts evenly, the remainders
// in the last.
func (s *series) spread(k int, succ, fail, rej uint64) {
	n := uint64(k)
	for i := 1; i < k; i++ {
		s.push(succ/n, fail/n, rej/n)
	}
	s.push(succ/n+succ%n, fail/n+fail%n, rej/n+rej%n)
}

func pushOne(xs []uint64, x uint64) []uint64 {
	if len(xs) == cap(xs) {
		copy(xs, xs[1:])
		xs = xs[:len(xs)-1]
	}
	return append(xs, x)
}

// Series are counts per sampling interval, oldest first, for sparklines.
type Series struct {
	Successes, Failures, Rejections []uint64
}

func (s *series) export() Series {
	return Series{Successes: clone(s.succ), Failures: clone(s.fail), Rejections: clone(s.rej)}
}

func clone(xs []uint64) []uint64 { return append([]uint64(nil), xs...) }

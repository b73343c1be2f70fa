package retrypolicy

// Review87Charged returns the retries q counts in its window now.
func Review87Charged(q *Quota) uint64 { return q.retries.Sum(q.clock.Now(&q.calls)) }

// Review87Calls returns the calls q counts in its window now.
func Review87Calls(q *Quota) uint64 { return q.calls.Sum(q.clock.Now(&q.calls)) }

package throttle_test

import (
	"testing"
	"time"
)

// As TestReview160LowKRecoveryWithBackgroundFailures at 1,000 calls a
// second, K's documented rate, 5 seeds.
func TestReview160LowKRecoveryAt1000(t *testing.T) {
	defer func(s []float64, n uint64, g time.Duration) {
		review160LowKShares, review160LowKSeeds, review160Gap = s, n, g
	}(review160LowKShares, review160LowKSeeds, review160Gap)
	review160LowKShares, review160LowKSeeds, review160Gap = []float64{0, 0.03}, 5, time.Millisecond
	TestReview160LowKRecoveryWithBackgroundFailures(t)
}

// K 1.5 (tolerates 33% failing) with 10% failing, K 2 with 30%.
func TestReview160MidKRecoveryAt1000(t *testing.T) {
	defer func(s []float64, n uint64, g time.Duration, k float64) {
		review160LowKShares, review160LowKSeeds, review160Gap, review160K = s, n, g, k
	}(review160LowKShares, review160LowKSeeds, review160Gap, review160K)
	review160LowKSeeds, review160Gap = 5, time.Millisecond
	review160LowKShares, review160K = []float64{0.1}, 1.5
	TestReview160LowKRecoveryWithBackgroundFailures(t)
	review160LowKShares, review160K = []float64{0.3}, 2
	TestReview160LowKRecoveryWithBackgroundFailures(t)
}

package retrypolicy

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const draws = 10_000

// sample returns draws sequences of the first n delays of p.
func sample(p *Policy, n int) [][]time.Duration {
	out := make([][]time.Duration, n)
	for range draws {
		d := p.cfg.newDelays()
		for i := range n {
			out[i] = append(out[i], d.NextBackOff())
		}
	}
	return out
}

func mean(ds []time.Duration) float64 {
	var sum float64
	for _, d := range ds {
		sum += float64(d)
	}
	return sum / float64(len(ds))
}

var caps = []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond}

func TestFullJitterIsUniformBelowCap(t *testing.T) {
	for n, seq := range sample(New(), len(caps)) {
		c := caps[n]
		for _, d := range seq {
			require.GreaterOrEqual(t, d, time.Duration(0))
			require.LessOrEqual(t, d, c)
		}
		assert.InEpsilon(t, float64(c)/2, mean(seq), 0.05, "retry %d", n)
	}
}

func TestEqualJitterStaysInUpperHalf(t *testing.T) {
	for n, seq := range sample(New(Jitter(Equal)), len(caps)) {
		c := caps[n]
		for _, d := range seq {
			require.GreaterOrEqual(t, d, c/2)
			require.LessOrEqual(t, d, c)
		}
		assert.InEpsilon(t, float64(c)*3/4, mean(seq), 0.05, "retry %d", n)
	}
}

func TestNoJitterIsExactlyTheCap(t *testing.T) {
	d := New(Jitter(None)).cfg.newDelays()
	for _, c := range caps {
		assert.Equal(t, c, d.NextBackOff())
	}
}

func TestDecorrelatedJitterGrowsFromThePreviousDelay(t *testing.T) {
	const base, maxDelay = 100 * time.Millisecond, 2 * time.Second
	p := New(Jitter(Decorrelated), BaseDelay(base), MaxDelay(maxDelay))
	for range draws {
		d := p.cfg.newDelays()
		prev := base
		for range 8 {
			got := d.NextBackOff()
			require.GreaterOrEqual(t, got, base)
			require.LessOrEqual(t, got, min(maxDelay, 3*prev))
			prev = got
		}
	}
}

func TestCapsAreMinOfDoublingAndMaxDelay(t *testing.T) {
	tests := []struct {
		name      string
		base, max time.Duration
		want      []time.Duration
	}{
		{"defaults", 100 * time.Millisecond, 10 * time.Second, []time.Duration{100e6, 200e6, 400e6, 800e6, 1600e6, 3200e6, 6400e6, 10e9, 10e9}},
		{"max reached early", time.Second, 3 * time.Second, []time.Duration{1e9, 2e9, 3e9, 3e9}},
		{"max below base", time.Second, 500 * time.Millisecond, []time.Duration{500e6, 500e6}},
		{"zero base", 0, time.Second, []time.Duration{0, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := New(Jitter(None), BaseDelay(tt.base), MaxDelay(tt.max)).cfg.newDelays()
			for i, want := range tt.want {
				assert.Equal(t, want, d.NextBackOff(), "retry %d", i)
			}
		})
	}
}

func TestJitterModeString(t *testing.T) {
	for m, want := range map[JitterMode]string{Full: "full", Equal: "equal", Decorrelated: "decorrelated", None: "none", 9: "unknown"} {
		assert.Equal(t, want, m.String())
	}
}

func TestDelaysIsTheSameSequence(t *testing.T) {
	var got []time.Duration
	for d := range New(Jitter(None)).Delays() {
		if got = append(got, d); len(got) == len(caps) {
			break
		}
	}
	assert.Equal(t, caps, got)
}

// TestDecorrelatedJitterMatchesTheBlogsFormula: min(max, U[base, 3*prev])
// sits at max with a fixed probability once it gets near; drawing below
// min(max, 3*prev) instead never reaches it.
func TestDecorrelatedJitterMatchesTheBlogsFormula(t *testing.T) {
	const base, maxDelay, n = 100 * time.Millisecond, time.Second, 200_000
	d := New(Jitter(Decorrelated), BaseDelay(base), MaxDelay(maxDelay)).cfg.newDelays()
	var atMax int
	var sum time.Duration
	for range n {
		got := d.NextBackOff()
		if got == maxDelay {
			atMax++
		}
		sum += got
	}
	// The stationary values of this chain, from a simulation of the formula
	// itself (10^6 steps): P(max) 0.483, mean 736 ms. Drawing below
	// min(max, 3*prev) instead gives P(max) 0 and a mean of 490 ms.
	assert.InDelta(t, 0.483, float64(atMax)/n, 0.01)
	assert.InDelta(t, 735, float64(sum/n)/1e6, 15)
}

func TestDelaysNearMaxInt64(t *testing.T) {
	for _, m := range []JitterMode{Full, Equal, Decorrelated, None} {
		t.Run(m.String(), func(t *testing.T) {
			d := New(Jitter(m), BaseDelay(time.Second), MaxDelay(math.MaxInt64)).cfg.newDelays()
			for i := range 200 {
				got := d.NextBackOff() // panicked at the 35th with Int64N(MaxInt64+1)
				require.GreaterOrEqual(t, got, time.Duration(0), "retry %d", i)
			}
		})
	}
	// Delays that huge end past any deadline: the loop gives up at once.
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	p := New(BaseDelay(math.MaxInt64), MaxDelay(math.MaxInt64), MaxAttempts(0))
	_, err := Do(ctx, p, func(context.Context) (int, error) { return 0, errors.New("blip") })
	require.ErrorIs(t, err, ErrOutOfTime)
}

func TestNonsenseOptionsPanicNamingTheOption(t *testing.T) {
	tests := []struct {
		name string
		f    func()
		want string
	}{
		{"negative attempts", func() { MaxAttempts(-1) }, "MaxAttempts(-1)"},
		{"negative base", func() { BaseDelay(-time.Second) }, "BaseDelay(-1s)"},
		{"zero max delay", func() { MaxDelay(0) }, "MaxDelay(0s)"},
		{"negative max delay", func() { MaxDelay(-1) }, "MaxDelay(-1ns)"},
		{"unknown jitter", func() { Jitter(JitterMode(9)) }, "Jitter(9)"},
		{"NaN quota", func() { NewQuota(math.NaN(), 0, 0) }, "NewQuota ratio NaN"},
		{"negative quota window", func() { NewQuota(0.1, 0, -time.Second) }, "NewQuota window -1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				r := recover()
				require.NotNil(t, r, "no panic")
				assert.Contains(t, r, tt.want)
			}()
			tt.f()
		})
	}
}

// TestJitterReachesBothEndsOfItsRange: the draw is over the closed range,
// the cap included: with a cap of 3 ns every one of 0 to 3 comes up.
func TestJitterReachesBothEndsOfItsRange(t *testing.T) {
	seen := map[time.Duration]bool{}
	for range 1000 {
		seen[full(3)] = true
	}
	assert.Equal(t, map[time.Duration]bool{0: true, 1: true, 2: true, 3: true}, seen)
	assert.Equal(t, 5*time.Nanosecond, uniform(5, 5), "an empty range is its one value")
}

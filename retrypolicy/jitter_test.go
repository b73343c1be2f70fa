package retrypolicy

import (
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

package pipeline

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/resiliencekit/resiliencekit/internal/monotime"
	"github.com/stretchr/testify/require"
)

// TestDueHeapKeepsOrderAndPlaces: entries pushed in any order (many due
// at once) and removed from anywhere leave a heap whose entries know their
// place, and which gives the rest back by when they are due.
func TestDueHeapKeepsOrderAndPlaces(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var h dueHeap
	in := map[*hedgeDue]bool{}
	check := func() {
		t.Helper()
		for i, e := range h {
			if e.pos != i+1 || i > 0 && h[(i-1)/2].at > e.at {
				t.Fatalf("entry at %d: pos %d, due %d, its parent %d", i, e.pos, e.at, h[(i-1)/2].at)
			}
		}
		require.Len(t, h, len(in))
	}
	for range 3000 {
		if len(h) == 0 || rng.IntN(3) > 0 {
			e := &hedgeDue{at: monotime.Reading(rng.IntN(50))}
			h.push(e)
			in[e] = true
		} else {
			i := rng.IntN(len(h))
			e := h[i]
			require.Same(t, e, h.remove(i))
			require.Zero(t, e.pos)
			delete(in, e)
		}
		check()
	}
	var got []monotime.Reading
	for len(h) > 0 {
		e := h.remove(0)
		delete(in, e)
		got = append(got, e.at)
		check()
	}
	require.True(t, slices.IsSorted(got))
}

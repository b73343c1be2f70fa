package breaker_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
)

// In a testing/synctest bubble every clock reading is virtual, so a run is
// expected to be the same in every process (examples/storm's figures rely
// on it). The breaker's sampling of answer times is not: its xorshift seed
// is uint64(c.start)|1, a monotime reading, which is the bubble's time
// minus internal/monotime's base, the process's real start time; and its
// slow spans (10 s of monotime readings) are phased by that base too. So
// whether a slow answer after the first 16 is timed, hence whether a call
// its caller's deadline ended counts as a failure (cutShort), hence
// whether the breaker opens, is drawn afresh in each process.

var review166Slow = 16

const review166SeedEnv = "REVIEW166_BREAKER_SEED_CHILD"

// review166Scene: 16 fast answers (all timed), 16 slow ones of 600 ms
// (timed or not by the draw), then 5 calls that their 300 ms deadline
// ends. They are failures unless an answer slower than 300 ms was timed;
// 5 failures in a row open the breaker.
func review166Scene(t *testing.T) string {
	var state string
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("r166")
		ok := func(d time.Duration) {
			_ = b.Execute(context.Background(), func(context.Context) error { time.Sleep(d); return nil })
		}
		for range 16 {
			ok(10 * time.Millisecond)
		}
		var wg sync.WaitGroup
		for range review166Slow {
			wg.Go(func() { ok(600 * time.Millisecond) })
		}
		wg.Wait()
		for range 5 {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			_ = b.Execute(ctx, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
			cancel()
		}
		state = b.State().String()
	})
	return state
}

func TestReview166BreakerSeedChild(t *testing.T) {
	if os.Getenv(review166SeedEnv) == "" {
		t.Skip("run by TestReview166BreakerSameInEveryProcess")
	}
	fmt.Printf("REVIEW166STATE=%s\n", review166Scene(t))
}

// TestReview166BreakerSameInEveryProcess: the same scene, in virtual time,
// in 10 processes, ends in the same state.
func TestReview166BreakerSameInEveryProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("ten processes")
	}
	inProcess := map[string]int{}
	for range 3 {
		inProcess[review166Scene(t)]++
	}
	got := map[string]int{}
	for range 10 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestReview166BreakerSeedChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), review166SeedEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		s := string(out)
		i := strings.Index(s, "REVIEW166STATE=")
		if i < 0 {
			t.Fatalf("child said nothing:\n%s", s)
		}
		got[strings.Fields(s[i+len("REVIEW166STATE="):])[0]]++
	}
	t.Logf("in this process, 3 runs: %v; in 10 processes: %v", inProcess, got)
	if len(got) > 1 {
		t.Errorf("the same virtual-time scene ends in %d different states across processes: %v", len(got), got)
	}
}

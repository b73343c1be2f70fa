package idempotency

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// r152PanicStore fails the first Begin and panics on the probe key.
type r152PanicStore struct{ *r152Store }

func (s r152PanicStore) Begin(ctx context.Context, key string, claim Record, lease time.Duration) (*Record, error) {
	if key == probeKey {
		panic("review152: store bug")
	}
	return nil, errR152Blip
}

// A store that panics is the guard's to contain where no caller can
// recover it (CompleteLater, the reaping of orphans recover it): the
// probe chain's probe runs on a timer's goroutine, and a store that
// panics there ends the process. Run in a child process.
func TestReview152StorePanicInTheProbeChainEndsTheProcess(t *testing.T) {
	if os.Getenv("R152_CHILD") == "1" {
		g, _ := r152Guard(r152PanicStore{newR152Store()}, StoreTimeout(100*time.Millisecond), Lease(time.Second))
		func() {
			defer func() { _ = recover() }() // the request's own call: its caller's to recover
			_, _, err := g.Begin(context.Background(), "s", "k", "fp")
			_ = err
		}()
		time.Sleep(2500 * time.Millisecond) // the chain probes at 1 s and 2 s
		os.Stdout.WriteString("R152-SURVIVED\n")
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestReview152StorePanicInTheProbeChainEndsTheProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "R152_CHILD=1")
	out, err := cmd.CombinedOutput()
	if !strings.Contains(string(out), "R152-SURVIVED") {
		first := string(out)
		if i := strings.Index(first, "goroutine"); i > 0 {
			first = first[:i]
		}
		t.Errorf("a store that panics as the guard's probe chain asks it killed the process (%v): %s", err, strings.TrimSpace(first))
	}
}

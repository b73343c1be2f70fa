package idempotencystore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

const r165ChildEnv = "REVIEW165_CHILD_REDIS"

// Several OS processes (replicas), many goroutines each, one key, a
// handler slower than the lease (1.5 leases), Redis frozen for a spell
// inside the documented ride-through bound: one run, every caller gets
// the one answer.
func TestReview165ReplicaProcessesOneKey(t *testing.T) {
	if addr := os.Getenv(r165ChildEnv); addr != "" {
		r165Child(t, addr)
		return
	}
	srv := redistest.Start(t)
	c := r165Client(t, srv.Addr())
	const procs = 3
	outs := make([]strings.Builder, procs)
	var wg sync.WaitGroup
	for i := range procs {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestReview165ReplicaProcessesOneKey$", "-test.count", "1", "-test.v")
		cmd.Env = append(os.Environ(), r165ChildEnv+"="+srv.Addr())
		cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = cmd.Wait() })
	}
	time.Sleep(700 * time.Millisecond) // children started, the key claimed
	srv.Freeze()
	time.Sleep(350 * time.Millisecond) // within the ride-through bound for a store that hangs: 2/3 L - min(L/12, ST/2) - ST = 450 ms
	srv.Thaw()
	wg.Wait()
	runs, _ := c.Get(t.Context(), "review165:runs").Int()
	bodies := map[string]bool{}
	for i := range procs {
		out := outs[i].String()
		var line string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "R165 ") {
				line = l
			}
		}
		if line == "" {
			t.Errorf("child %d: no result:\n%s", i, out)
			continue
		}
		t.Log(line)
		var body string
		var answered, of int
		if _, err := fmt.Sscanf(line, "R165 %d/%d %s", &answered, &of, &body); err != nil {
			t.Errorf("child %d: %q: %v", i, line, err)
			continue
		}
		if answered != of {
			t.Errorf("child %d: %d of %d callers got the answer", i, answered, of)
		}
		bodies[body] = true
	}
	if runs != 1 {
		t.Errorf("%d runs of one key across %d processes", runs, procs)
	}
	if len(bodies) != 1 {
		t.Errorf("callers got different answers: %v", bodies)
	}
}

func r165Child(t *testing.T, addr string) {
	const lease, st = 900 * time.Millisecond, 100 * time.Millisecond
	c := r165Client(t, addr)
	g := idempotency.NewGuard(idempotencystore.New(c, ""), idempotency.Lease(lease), idempotency.StoreTimeout(st))
	const callers = 20
	var mu sync.Mutex
	answers := map[string]int{}
	var wg sync.WaitGroup
	ctx := context.Background()
	for range callers {
		wg.Go(func() {
			deadline := time.Now().Add(8 * time.Second)
			for time.Now().Before(deadline) {
				claim, rec, err := g.Begin(ctx, "s", "the-key", "fp")
				switch {
				case claim != nil:
					_ = c.Incr(ctx, "review165:runs").Err()
					time.Sleep(lease * 3 / 2) // slower than the lease
					body := fmt.Sprintf("order-of-pid-%d", os.Getpid())
					if err := claim.Complete(ctx, idempotency.Record{Status: 201, Body: []byte(body)}); err != nil {
						fmt.Printf("complete: %v\n", err)
					}
					mu.Lock()
					answers[body]++
					mu.Unlock()
					return
				case rec != nil:
					mu.Lock()
					answers[string(rec.Body)]++
					mu.Unlock()
					return
				case errors.Is(err, idempotency.ErrInProgress):
				default:
					fmt.Printf("begin: %v\n", err)
				}
				time.Sleep(40 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	n, body := 0, "none"
	for b, k := range answers {
		n += k
		if len(answers) > 1 {
			body = "MIXED"
		} else {
			body = b
		}
	}
	fmt.Printf("R165 %d/%d %s\n", n, callers, body)
}

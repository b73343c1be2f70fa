package dashboard_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/dashboard"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
)

// review43Fleet: n pipelines, each on a breaker of its own, with every
// point of their series non-zero (as in a busy service).
func review43Fleet(t testing.TB, n int) (*registry.Registry, []*pipeline.Pipeline) {
	reg := registry.New(registry.Interval(time.Millisecond, 300))
	var ps []*pipeline.Pipeline
	for i := range n {
		p, err := reg.AddPipeline(pipeline.New(pipeline.WithBreaker(breaker.New(fmt.Sprintf("svc-%03d.example.internal:GET /api/v1/thing", i)))))
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	for range 300 {
		for _, p := range ps {
			_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
		}
		time.Sleep(time.Millisecond)
		reg.Snapshot()
	}
	return reg, ps
}

func BenchmarkReview43State(b *testing.B) {
	reg, ps := review43Fleet(b, 500)
	h := dashboard.New(reg)
	b.ReportAllocs()
	size := 0
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/state", nil))
		size = rec.Body.Len()
	}
	b.ReportMetric(float64(size), "bytes/state")
	runtime.KeepAlive(ps)
}

// "Interval sets how often the page gets the state: a change shows within
// it": with many pages open on a registry of 500 pipelines, how often
// does each get it, and how long does a control wait for the registry?
func TestReview43IntervalHoldsWithManyPages(t *testing.T) {
	if raceEnabled {
		t.Skip("a real-time bound on a 2-core machine: the race detector takes the CPU it measures; .ci/run runs it without")
	}
	reg, ps := review43Fleet(t, 500)
	h := dashboard.New(reg, dashboard.WithAuthorizer(func(*http.Request, dashboard.Action) (string, error) { return "alice", nil }))
	srv := httptest.NewServer(h)
	defer srv.Close()
	const clients = 50
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var maxGap time.Duration
	var events atomic.Int64
	start := time.Now()
	for range clients {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/events", nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			br := bufio.NewReaderSize(resp.Body, 1<<20)
			last := time.Time{}
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				if strings.HasPrefix(line, "data: ") {
					now := time.Now()
					if !last.IsZero() && now.Sub(start) > time.Second {
						mu.Lock()
						maxGap = max(maxGap, now.Sub(last))
						mu.Unlock()
					}
					last = now
					events.Add(1)
				}
			}
		})
	}
	time.Sleep(time.Second)
	e0, t0 := events.Load(), time.Now()
	var worst time.Duration
	for i := range 20 {
		s := time.Now()
		_ = reg.SetMode(context.Background(), ps[i].Stages().Breaker.Name(), breaker.ForcedOpen, "t")
		worst = max(worst, time.Since(s))
		time.Sleep(100 * time.Millisecond)
	}
	e1 := events.Load()
	cancel()
	wg.Wait()
	runtime.KeepAlive(ps)
	rate := float64(e1-e0) / time.Since(t0).Seconds() / clients
	t.Logf("%d pages: %.2f events/s a page (interval 500 ms: 2), longest gap %v; registry.SetMode waited up to %v", clients, rate, maxGap, worst)
	if maxGap > time.Second {
		t.Errorf("a page went %v without the state, interval 500 ms", maxGap)
	}
}

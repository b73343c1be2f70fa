package dashboard_test

import (
	"bufio"
	"context"
	"errors"
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

// Hundreds of pages come and go while pipelines and breakers are
// registered, called, removed and dropped, and modes forced: no race, no
// goroutine left, memory back where it was.
func TestReview43ChurnWhileStreaming(t *testing.T) {
	reg := registry.New(registry.Interval(time.Millisecond, 60))
	h := dashboard.New(reg, dashboard.Interval(5*time.Millisecond),
		dashboard.WithAuthorizer(func(*http.Request, dashboard.Action) (string, error) { return "alice", nil }))
	srv := httptest.NewServer(h)
	defer srv.Close()
	base := runtime.NumGoroutine()
	var stop atomic.Bool
	var wg sync.WaitGroup
	down := errors.New("down")
	for g := range 3 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				b := breaker.New(fmt.Sprintf("b%d-%d", g, i%10), breaker.ConsecutiveFailures(2))
				p, err := reg.AddPipeline(pipeline.New(pipeline.WithBreaker(b)))
				if err != nil {
					continue
				}
				for j := range 10 {
					_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
						if j%3 == 0 {
							return 0, down
						}
						return 1, nil
					})
				}
				_ = reg.SetMode(context.Background(), b.Name(), breaker.ForcedOpen, "x")
				if i%2 == 0 {
					reg.RemovePipeline(b.Name())
					reg.RemoveBreaker(b.Name())
				}
				if i%20 == 0 {
					runtime.GC()
				}
			}
		})
	}
	var events atomic.Int64
	for c := range 300 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(200+10*(c%50))*time.Millisecond)
			defer cancel()
			path := "/api/events"
			if c%5 == 0 {
				path = "/api/state"
			}
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				if strings.HasPrefix(line, "data: ") {
					events.Add(1)
				}
			}
		})
		if c%50 == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	time.Sleep(2 * time.Second)
	stop.Store(true)
	wg.Wait()
	http.DefaultClient.CloseIdleConnections()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base+2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%d events to 300 pages; goroutines %d -> %d", events.Load(), base, runtime.NumGoroutine())
	if n := runtime.NumGoroutine(); n > base+2 {
		t.Errorf("goroutines: %d, were %d", n, base)
	}
	if n := review43CountGoroutines("serveEvents"); n != 0 {
		t.Errorf("%d streams still served", n)
	}
}

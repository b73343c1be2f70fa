package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/dashboard"
)

// A change shows within an interval and a quarter: a breaker's mode is set,
// and every one of 20 streams must show it within 1.25 intervals (+ slack).
func TestReview46_ChangeShowsWithinIntervalAndAQuarter(t *testing.T) {
	if raceEnabled {
		t.Skip("a real-time bound on a 2-core machine: the race detector takes the CPU it measures; .ci/run runs it without")
	}
	for _, n := range []int{5, 200} {
		t.Run(fmt.Sprint("breakers=", n), func(t *testing.T) {
			reg, bs := review46Registry(t, n)
			defer runtime.KeepAlive(bs)
			const interval = 100 * time.Millisecond
			h := dashboard.New(reg, dashboard.Interval(interval))
			defer h.Close()
			ts := review46Server(t, h, false)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var changedAt time.Time
			var mu sync.Mutex
			var lat []time.Duration
			var maxAge time.Duration
			var wg sync.WaitGroup
			ready := make(chan struct{}, 20)
			for i := 0; i < 20; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/api/events", nil)
					resp, err := ts.Client().Do(req)
					if err != nil {
						return
					}
					defer resp.Body.Close()
					sc := bufio.NewScanner(resp.Body)
					sc.Buffer(nil, 64<<20)
					first := true
					for sc.Scan() {
						line := sc.Text()
						if !strings.HasPrefix(line, "data: ") {
							continue
						}
						got := time.Now()
						var v struct {
							At       time.Time `json:"at"`
							Breakers []struct {
								Name, Mode string
							} `json:"breakers"`
						}
						if json.Unmarshal([]byte(line[6:]), &v) != nil {
							continue
						}
						mu.Lock()
						if age := got.Sub(v.At); age > maxAge {
							maxAge = age
						}
						mu.Unlock()
						if first {
							first = false
							ready <- struct{}{}
						}
						for _, b := range v.Breakers {
							if b.Name == bs[0].Name() && b.Mode == breaker.ForcedOpen.String() {
								mu.Lock()
								lat = append(lat, got.Sub(changedAt))
								mu.Unlock()
								return
							}
						}
					}
				}()
			}
			for i := 0; i < 20; i++ {
				<-ready
			}
			time.Sleep(interval + 37*time.Millisecond)
			mu.Lock()
			changedAt = time.Now()
			mu.Unlock()
			if err := reg.SetMode(context.Background(), bs[0].Name(), breaker.ForcedOpen, "test"); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				cancel()
				<-done
			}
			var worst time.Duration
			for _, d := range lat {
				worst = max(worst, d)
			}
			t.Logf("%d of 20 streams showed the change; slowest after %v (bound %v); oldest event at arrival %v (quarter %v)",
				len(lat), worst, interval*5/4, maxAge, interval/4)
			if len(lat) != 20 || worst > interval*5/4+30*time.Millisecond {
				t.Errorf("a change did not show within an interval and a quarter")
			}
		})
	}
}

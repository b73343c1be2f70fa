package httpclient_test

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

type r114Names struct {
	mu    sync.Mutex
	names map[string]int
}

func (l *r114Names) OnEvent(e resilience.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.names == nil {
		l.names = map[string]int{}
	}
	l.names[e.Name]++
}

// Past MaxBreakers: a dead host gets at most MaxAttempts attempts a call,
// within the budget; healthy hosts past the bound are served; the events
// of the calls past the bound name the dependency, as the pipeline's did
// before (its name).
func TestReview114_OverflowDeadHostAndEvents(t *testing.T) {
	var deadHits atomic.Int32
	dead := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		deadHits.Add(1)
		w.WriteHeader(503)
	}))
	defer dead.Close()
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer ok.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	first := "http://" + ln.Addr().String()
	ln.Close()

	names := &r114Names{}
	shared := breaker.New("orders", breaker.ConsecutiveFailures(2), breaker.OpenTimeout(50*time.Millisecond))
	p := pipeline.New(pipeline.WithBreaker(shared), pipeline.WaitWhenOpen(), pipeline.WithRetry(r114Fast()),
		pipeline.WithTimeBudget(500*time.Millisecond), pipeline.WithListener(names),
		pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1))))
	rt := httpclient.NewTransport(httpclient.WithPipeline(p), httpclient.MaxBreakers(1),
		httpclient.BreakerPerHost(func(auth string) *breaker.Breaker {
			return breaker.New(auth, breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Hour))
		}))
	hc := &http.Client{Transport: rt}
	// The slot goes to first (refused).
	if _, err := hc.Get(first); err == nil {
		t.Fatal("refused host answered")
	}
	const calls = 10
	for range calls {
		resp, err := hc.Get(dead.URL)
		if err != nil {
			t.Fatalf("dead: %v", err)
		}
		resp.Body.Close()
		resp, err = hc.Get(ok.URL)
		if err != nil {
			t.Fatalf("a healthy host past the bound failed: %v", err)
		}
		resp.Body.Close()
	}
	maxAtt := p.MaxAttempts()
	// hedges twin each attempt: at most 2 per attempt here (MaxExtra default?)
	if h := deadHits.Load(); int(h) > calls*maxAtt*3 {
		t.Errorf("dead host got %d requests for %d calls of at most %d attempts", h, calls, maxAtt)
	}
	t.Logf("dead host: %d requests for %d calls (MaxAttempts %d)", deadHits.Load(), calls, maxAtt)
	names.mu.Lock()
	defer names.mu.Unlock()
	t.Logf("event names: %v", names.names)
	if n := names.names[""]; n > 0 {
		t.Errorf("%d events with no dependency name (the calls past MaxBreakers); the pipeline's were named %q", n, p.Stages().Name)
	}
	if errors.Is(nil, breaker.ErrOpen) {
		t.Fatal()
	}
}

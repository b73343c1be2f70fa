package dashboard_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/dashboard"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
)

// frozenStore never answers until released (or the context ends, for
// the operations that honour it: frozen means it ignores contexts).
type review43Frozen struct {
	release chan struct{}
	honours bool // Force, Restore and Forced end with their context
}

func (s review43Frozen) wait(ctx context.Context) {
	if s.honours {
		select {
		case <-s.release:
		case <-ctx.Done():
		}
		return
	}
	<-s.release
}

func (s review43Frozen) Sync(ctx context.Context, _ string, _ breaker.Sync) (breaker.Fleet, error) {
	<-s.release
	return breaker.Fleet{}, context.Canceled
}
func (s review43Frozen) Force(ctx context.Context, _ string, _ breaker.Forcing, _ uint64) error {
	s.wait(ctx)
	return context.Canceled
}
func (s review43Frozen) Restore(ctx context.Context, _ string, _ breaker.Forcing, _ uint64) error {
	s.wait(ctx)
	return context.Canceled
}
func (s review43Frozen) Forced(ctx context.Context, _ string) (breaker.Forcing, uint64, error) {
	s.wait(ctx)
	return breaker.Forcing{}, 0, context.Canceled
}

// A shared breaker whose store froze (ignores contexts): the page, the
// JSON and the registry stay prompt, a control returns within its bound
// saying the fleet did not take it, and calls still pass.
func TestReview43FrozenStore(t *testing.T) {
	t.Run("HonoursContexts", func(t *testing.T) { review43FrozenStore(t, true) })
}

func review43FrozenStore(t *testing.T, honours bool) {
	st := review43Frozen{release: make(chan struct{}), honours: honours}
	b := breaker.New("fleet", breaker.Shared(st), breaker.FailureRate(0.5, 10), breaker.FlushInterval(50*time.Millisecond))
	reg := registry.New()
	p, err := reg.AddPipeline(pipeline.New(pipeline.WithBreaker(b)))
	if err != nil {
		t.Fatal(err)
	}
	h := dashboard.New(reg, dashboard.WithAuthorizer(func(*http.Request, dashboard.Action) (string, error) { return "alice", nil }))
	srv := httptest.NewServer(h)
	defer srv.Close()
	time.Sleep(200 * time.Millisecond)

	timed := func(what string, bound time.Duration, f func()) {
		start := time.Now()
		done := make(chan struct{})
		go func() { f(); close(done) }()
		select {
		case <-done:
			t.Logf("%s: %v", what, time.Since(start))
		case <-time.After(bound):
			t.Errorf("%s: not done within %v", what, bound)
		}
	}
	timed("api/state", time.Second, func() {
		resp, err := http.Get(srv.URL + "/api/state")
		if err == nil {
			resp.Body.Close()
		}
	})
	timed("a call", time.Second, func() {
		if _, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil }); err != nil {
			t.Errorf("call: %v", err)
		}
	})
	var tok string
	timed("page", time.Second, func() {
		resp, err := http.Get(srv.URL + "/")
		if err != nil {
			return
		}
		defer resp.Body.Close()
		var sb strings.Builder
		buf := make([]byte, 1<<16)
		for {
			n, err := resp.Body.Read(buf)
			sb.Write(buf[:n])
			if err != nil {
				break
			}
		}
		if m := regexp.MustCompile(`data-token="([0-9a-f]+)"`).FindStringSubmatch(sb.String()); m != nil {
			tok = m[1]
		}
	})
	timed("control", 7*time.Second, func() {
		req, _ := http.NewRequest("POST", srv.URL+"/api/mode", strings.NewReader("name=fleet&mode=forced-open"))
		req.Header.Set("Content-Type", review43Form)
		req.Header.Set("X-CSRF-Token", tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		resp.Body.Close()
		t.Logf("control status %d", resp.StatusCode)
	})
	timed("registry.Names while a control waits", time.Second, func() { reg.Names() })
	close(st.release)
	_ = b.SetMode(context.Background(), breaker.Normal, "t")
	b.Close()
}

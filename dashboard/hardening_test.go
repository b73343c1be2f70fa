package dashboard_test

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/dashboard"
	"github.com/resiliencekit/resiliencekit/registry"
)

// handler is a dashboard of a registry holding b, served without a
// server: the requests name their own Host.
func handler(t *testing.T, b *breaker.Breaker, opts ...dashboard.Option) *dashboard.Handler {
	t.Helper()
	reg := registry.New()
	require.NoError(t, reg.AddBreaker(b))
	t.Cleanup(func() { runtime.KeepAlive(b) }) // the registry holds it weakly
	return dashboard.New(reg, opts...)
}

// tokenOf returns the CSRF token of the page that h serves to req.
func tokenOf(t *testing.T, h http.Handler, req *http.Request) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	_, rest, _ := strings.Cut(rec.Body.String(), `data-token="`)
	tok, _, _ := strings.Cut(rest, `"`)
	return tok
}

// post is a control as the page sends it, for the host of target.
func post(target, form, tok string) *http.Request {
	req := httptest.NewRequest(http.MethodPost, target, strings.NewReader(form))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set("X-CSRF-Token", tok)
	return req
}

// A path that starts with two slashes (or a slash and a backslash), as
// the handler sees it mounted at a server's root, is redirected on the
// dashboard's own site, never to the host it names.
func TestARedirectStaysOnTheSite(t *testing.T) {
	h := handler(t, breaker.New("db"))
	for _, p := range []string{"//evil.example/x", "/\\evil.example/x", "///evil.example/x", "/\\/evil.example/x", "\\\\evil.example/x", "/debug/resilience"} {
		req := httptest.NewRequest(http.MethodGet, "http://dash.internal/", nil)
		req.URL.Path = p
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusMovedPermanently, rec.Code, p)
		loc := rec.Header().Get("Location")
		u, err := url.Parse(loc)
		require.NoError(t, err)
		assert.Empty(t, u.Host, "%s: Location %q", p, loc)
		assert.False(t, strings.HasPrefix(loc, "//") || strings.HasPrefix(loc, "/\\"), "%s: Location %q", p, loc)
		assert.True(t, strings.HasSuffix(loc, "/"), loc)
	}
}

// DNS rebinding: a page of evil.example, whose name then resolves to the
// dashboard's address, is same-origin for the browser, gets a token, and
// controls the breaker if the authorizer trusts the network. With
// AllowedHosts, every request for another host is refused (421), and the
// dashboard's own host names are served, in any case and with a port.
func TestAllowedHostsRefuseARebindingPage(t *testing.T) {
	anyone := func(*http.Request, dashboard.Action) (string, error) { return "ops", nil }
	rebind := func(h http.Handler) (int, string) {
		tok := tokenOf(t, h, httptest.NewRequest(http.MethodGet, "http://evil.example:8080/", nil))
		req := post("http://evil.example:8080/api/mode", "name=db&mode=forced-open", tok)
		req.Header.Set("Origin", "http://evil.example:8080")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, tok
	}

	open := breaker.New("db")
	code, _ := rebind(handler(t, open, dashboard.WithAuthorizer(anyone)))
	assert.Equal(t, http.StatusOK, code, "the default: any host (the authorizer must not trust the network)")
	assert.Equal(t, breaker.ForcedOpen, open.Mode().Mode)

	b := breaker.New("db")
	h := handler(t, b, dashboard.WithAuthorizer(anyone), dashboard.AllowedHosts("dash.internal", "10.0.0.7", "::1"))
	code, tok := rebind(h)
	assert.Equal(t, http.StatusMisdirectedRequest, code)
	assert.Empty(t, tok, "no page, no token")
	assert.Equal(t, breaker.Normal, b.Mode().Mode)
	for _, p := range []string{"/", "/api/state", "/api/events", "/api/mode"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://evil.example"+p, nil))
		assert.Equal(t, http.StatusMisdirectedRequest, rec.Code, p)
	}
	for _, host := range []string{"DASH.internal:8080", "dash.internal", "10.0.0.7:80", "[::1]:8080"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://"+host+"/api/state", nil))
		assert.Equal(t, http.StatusOK, rec.Code, host)
	}
}

// The authorizer is asked only for a control that carries a token this
// dashboard made: a forged request (curl, a script) with no token or a
// made-up one never reaches it with the name and mode it chose. The token
// stays bound to its user: alice's is refused to bob.
func TestTheAuthorizerIsAskedOnlyWithAGenuineToken(t *testing.T) {
	var asked atomic.Int32
	b := breaker.New("db")
	h := handler(t, b, dashboard.WithAuthorizer(func(r *http.Request, a dashboard.Action) (string, error) {
		if a.Breaker != "" {
			asked.Add(1)
		}
		return r.Header.Get("X-User"), nil
	}))
	page := httptest.NewRequest(http.MethodGet, "http://dash/", nil)
	page.Header.Set("X-User", "alice")
	alice := tokenOf(t, h, page)
	require.NotEmpty(t, alice)

	for name, tok := range map[string]string{
		"none":          "",
		"not hex":       "zz" + alice,
		"short":         alice[:10],
		"made up":       strings.Repeat("0", 64) + "616c696365", // "alice", under no key
		"alice's, cut":  alice[:64],
		"alice's, bent": alice[:63] + bent(alice[63]) + alice[64:],
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, post("http://dash/api/mode", "name=db&mode=forced-open", tok))
		assert.Equal(t, http.StatusForbidden, rec.Code, name)
		assert.Contains(t, rec.Body.String(), "CSRF token", name)
	}
	assert.Zero(t, asked.Load(), "the authorizer was asked for a request without a genuine token")

	bob := post("http://dash/api/mode", "name=db&mode=forced-open", alice)
	bob.Header.Set("X-User", "bob")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, bob)
	assert.Equal(t, http.StatusForbidden, rec.Code, "alice's token is not bob's")
	assert.Equal(t, breaker.Normal, b.Mode().Mode)

	own := post("http://dash/api/mode", "name=db&mode=forced-open", alice)
	own.Header.Set("X-User", "alice")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, own)
	assert.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.Equal(t, breaker.ForcedOpen, b.Mode().Mode)
}

// A breaker with a long name (a URL path: 600 CJK characters are 5.4 kB
// percent-encoded) can be controlled; a form past the limit is refused
// with 413 and says why.
func TestALongNameCanBeControlled(t *testing.T) {
	name := strings.Repeat("名", 600)
	b := breaker.New(name)
	h := handler(t, b, dashboard.WithAuthorizer(alice))
	tok := tokenOf(t, h, httptest.NewRequest(http.MethodGet, "http://dash/", nil))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, post("http://dash/api/mode", url.Values{"name": {name}, "mode": {"forced-open"}}.Encode(), tok))
	assert.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.Equal(t, breaker.ForcedOpen, b.Mode().Mode)

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, post("http://dash/api/mode", "mode=normal&name="+strings.Repeat("x", 64<<10), tok))
	assert.Equal(t, http.StatusRequestEntityTooLarge, rec.Code)
	assert.Contains(t, rec.Body.String(), "form too large")
	assert.Equal(t, breaker.ForcedOpen, b.Mode().Mode)
}

// ctxStore keeps a fleet closed, and a forced mode unless the write's
// context is done.
type ctxStore struct {
	forced atomic.Pointer[breaker.Forcing]
}

func (*ctxStore) Sync(context.Context, string, breaker.Sync) (breaker.Fleet, error) {
	return breaker.Fleet{}, nil
}

func (s *ctxStore) Force(ctx context.Context, _ string, f breaker.Forcing, _ uint64) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if _, ok := ctx.Deadline(); !ok {
		return errors.New("unbounded")
	}
	s.forced.Store(&f)
	return nil
}

func (*ctxStore) Restore(context.Context, string, breaker.Forcing, uint64) error { return nil }

func (*ctxStore) Forced(context.Context, string) (breaker.Forcing, uint64, error) {
	return breaker.Forcing{}, 0, nil
}

var _ breaker.SharedForcer = (*ctxStore)(nil)

// A control's write to the store has a bounded context of its own: a
// user who leaves (the request's context ends) does not cut it short.
func TestAControlIsNotCutShortByItsRequest(t *testing.T) {
	st := &ctxStore{}
	b := breaker.New("fleet", breaker.Shared(st), breaker.FailureRate(0.5, 10))
	t.Cleanup(func() { _ = b.Close() })
	h := handler(t, b, dashboard.WithAuthorizer(alice))
	tok := tokenOf(t, h, httptest.NewRequest(http.MethodGet, "http://dash/", nil))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, post("http://dash/api/mode", "name=fleet&mode=forced-open", tok).WithContext(ctx))
	assert.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.NotNil(t, st.forced.Load())
	assert.Equal(t, breaker.ForcedOpen, st.forced.Load().Mode)
}

// An open page keeps its event stream's connection busy, which
// http.Server.Shutdown waits for: with srv.RegisterOnShutdown(h.Close)
// the streams end and Shutdown returns at once; a stream asked for after
// Close ends after its first event.
func TestCloseLetsTheServerShutDown(t *testing.T) {
	h := dashboard.New(registry.New(), dashboard.Interval(50*time.Millisecond))
	srv := httptest.NewUnstartedServer(h)
	srv.Config.RegisterOnShutdown(h.Close)
	srv.Start()
	t.Cleanup(srv.Close)
	res, err := srv.Client().Get(srv.URL + "/api/events")
	require.NoError(t, err)
	defer res.Body.Close()
	line, err := bufio.NewReader(res.Body).ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(line, "data: {"), line)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	assert.NoError(t, srv.Config.Shutdown(ctx), "Shutdown with a page open")
	t.Logf("Shutdown took %v", time.Since(start))

	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://dash/api/events", nil))
	}()
	select {
	case <-done:
		assert.Equal(t, 1, strings.Count(rec.Body.String(), "data: "))
	case <-time.After(2 * time.Second):
		t.Fatal("a stream asked for after Close goes on")
	}
}

// bent is a hex digit other than c: a token bent by it is never the token.
func bent(c byte) string {
	if c == '0' {
		return "1"
	}
	return "0"
}

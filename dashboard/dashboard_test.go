package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/dashboard"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const evil = `<script>alert(1)</script>`

// alice allows everything, as alice.
func alice(*http.Request, dashboard.Action) (string, error) { return "alice", nil }

// serve starts a dashboard of a registry holding a breaker named payments
// and one named evil, mounted as net/http/pprof would be.
func serve(t *testing.T, opts ...dashboard.Option) (*httptest.Server, *breaker.Breaker) {
	t.Helper()
	reg := registry.New()
	b := breaker.New("payments")
	require.NoError(t, reg.AddBreaker(b))
	eb := breaker.New(evil)
	require.NoError(t, reg.AddBreaker(eb))
	p, err := reg.AddPipeline(pipeline.New(pipeline.WithName(evil + " pipeline")))
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/debug/resilience/", dashboard.New(reg, opts...))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { runtime.KeepAlive([]any{b, eb, p}) }) // the registry holds them weakly
	return srv, b
}

// page returns the page and the CSRF token in it.
func page(t *testing.T, srv *httptest.Server) (string, string) {
	t.Helper()
	res, err := srv.Client().Get(srv.URL + "/debug/resilience/")
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	body, _ := io.ReadAll(res.Body)
	assert.Contains(t, res.Header.Get("Content-Security-Policy"), "default-src 'none'")
	html := string(body)
	_, rest, _ := strings.Cut(html, `data-token="`)
	tok, _, _ := strings.Cut(rest, `"`)
	return html, tok
}

// control posts a mode change as the page does, with the headers given.
func control(t *testing.T, srv *httptest.Server, method, name, mode string, hdr map[string]string) (int, string) {
	t.Helper()
	form := url.Values{"name": {name}, "mode": {mode}}
	req, err := http.NewRequest(method, srv.URL+"/debug/resilience/api/mode", strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var out map[string]string
	_ = json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, out["error"]
}

func sameOrigin(tok string) map[string]string {
	return map[string]string{"X-CSRF-Token": tok, "Sec-Fetch-Site": "same-origin"}
}

func TestNoControlWithoutTheAuthorizer(t *testing.T) {
	srv, b := serve(t)
	html, tok := page(t, srv)
	assert.Empty(t, tok, "a read-only page has no token")
	assert.Contains(t, html, `data-controls=""`)
	code, why := control(t, srv, http.MethodPost, "payments", "forced-open", sameOrigin(tok))
	assert.Equal(t, http.StatusForbidden, code)
	assert.Contains(t, why, "read-only")
	assert.Equal(t, breaker.Normal, b.Mode().Mode)
}

func TestControlNeedsPOSTTokenAndSameOrigin(t *testing.T) {
	srv, b := serve(t, dashboard.WithAuthorizer(alice))
	html, tok := page(t, srv)
	require.NotEmpty(t, tok)
	assert.Contains(t, html, `data-controls="1"`)

	code, why := control(t, srv, http.MethodPost, "payments", "forced-open", map[string]string{"Sec-Fetch-Site": "same-origin"})
	assert.Equal(t, http.StatusForbidden, code, "no token")
	assert.Contains(t, why, "CSRF")
	code, _ = control(t, srv, http.MethodPost, "payments", "forced-open", sameOrigin(tok[:len(tok)-1]+"0"))
	assert.Equal(t, http.StatusForbidden, code, "a wrong token")
	code, why = control(t, srv, http.MethodPost, "payments", "forced-open", map[string]string{"X-CSRF-Token": tok, "Sec-Fetch-Site": "cross-site"})
	assert.Equal(t, http.StatusForbidden, code, "cross-origin")
	assert.Contains(t, why, "refused")
	code, _ = control(t, srv, http.MethodPost, "payments", "forced-open", map[string]string{"X-CSRF-Token": tok, "Origin": "https://evil.example"})
	assert.Equal(t, http.StatusForbidden, code, "cross-origin, by Origin")
	code, _ = control(t, srv, http.MethodGet, "payments", "forced-open", sameOrigin(tok))
	assert.Equal(t, http.StatusMethodNotAllowed, code, "a GET changes nothing")
	assert.Equal(t, breaker.Normal, b.Mode().Mode, "nothing refused changed anything")

	code, why = control(t, srv, http.MethodPost, "nope", "forced-open", sameOrigin(tok))
	assert.Equal(t, http.StatusNotFound, code)
	assert.Contains(t, why, "no such breaker")
	code, _ = control(t, srv, http.MethodPost, "payments", "sideways", sameOrigin(tok))
	assert.Equal(t, http.StatusBadRequest, code)

	code, why = control(t, srv, http.MethodPost, "payments", "forced-open", sameOrigin(tok))
	require.Equal(t, http.StatusOK, code, why)
	assert.Equal(t, breaker.Forcing{Mode: breaker.ForcedOpen, By: "alice", At: b.Mode().At}, b.Mode())
	err := b.Execute(context.Background(), func(context.Context) error { return nil })
	assert.ErrorIs(t, err, breaker.ErrOpen)
	assert.Contains(t, err.Error(), "forced open by alice")
}

func TestTheTokenIsBoundToTheUser(t *testing.T) {
	who := "alice"
	srv, _ := serve(t, dashboard.WithAuthorizer(func(*http.Request, dashboard.Action) (string, error) { return who, nil }))
	_, tok := page(t, srv)
	who = "mallory"
	code, why := control(t, srv, http.MethodPost, "payments", "forced-open", sameOrigin(tok))
	assert.Equal(t, http.StatusForbidden, code)
	assert.Contains(t, why, "CSRF")
}

func TestTheAuthorizersRefusalSaysWhy(t *testing.T) {
	srv, b := serve(t, dashboard.WithAuthorizer(func(_ *http.Request, a dashboard.Action) (string, error) {
		if a.Mode == breaker.ForcedClosed {
			return "", errors.New("forcing closed needs the lead on call")
		}
		return "bob", nil
	}))
	_, tok := page(t, srv)
	code, why := control(t, srv, http.MethodPost, "payments", "forced-closed", sameOrigin(tok))
	assert.Equal(t, http.StatusForbidden, code)
	assert.Equal(t, "not allowed: forcing closed needs the lead on call", why)
	assert.Equal(t, breaker.Normal, b.Mode().Mode)
}

func TestNamesAreNeverMarkup(t *testing.T) {
	srv, _ := serve(t, dashboard.WithAuthorizer(alice), dashboard.Title(evil))
	html, _ := page(t, srv)
	assert.NotContains(t, html, evil, "the title is escaped")
	assert.Contains(t, html, "&lt;script&gt;alert(1)&lt;/script&gt;")

	res, err := srv.Client().Get(srv.URL + "/debug/resilience/api/state")
	require.NoError(t, err)
	defer res.Body.Close()
	assert.Equal(t, "application/json", res.Header.Get("Content-Type"))
	assert.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"))
	body, _ := io.ReadAll(res.Body)
	assert.NotContains(t, string(body), "<script>", "encoding/json escapes < and >")
	var s struct {
		Breakers []struct{ Name string }
	}
	require.NoError(t, json.Unmarshal(body, &s))
	require.Len(t, s.Breakers, 2)
	assert.Equal(t, evil, s.Breakers[0].Name, "the name itself is intact")
}

func TestStateAndEvents(t *testing.T) {
	srv, b := serve(t, dashboard.Interval(20*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/debug/resilience/api/events", nil)
	res, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	assert.Equal(t, "text/event-stream", res.Header.Get("Content-Type"))
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<20)
	next := func() map[string]any {
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var m map[string]any
				require.NoError(t, json.Unmarshal([]byte(data), &m))
				return m
			}
		}
		t.Fatal("the stream ended")
		return nil
	}
	state := func(m map[string]any) string {
		for _, x := range m["breakers"].([]any) {
			if x.(map[string]any)["name"] == "payments" {
				return x.(map[string]any)["state"].(string) + " " + x.(map[string]any)["mode"].(string)
			}
		}
		return ""
	}
	assert.Equal(t, "closed normal", state(next()))
	require.NoError(t, b.SetMode(ctx, breaker.ForcedOpen, "test"))
	deadline := time.Now().Add(time.Second)
	for state(next()) != "open forced-open" {
		require.True(t, time.Now().Before(deadline), "the change never came")
	}
}

func TestPathsAndMethods(t *testing.T) {
	srv, _ := serve(t)
	c := srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	res, err := c.Get(srv.URL + "/debug/resilience/nothing.txt")
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusNotFound, res.StatusCode)
	res, err = c.Post(srv.URL+"/debug/resilience/", "text/plain", nil)
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, res.StatusCode)

	mux := http.NewServeMux()
	mux.Handle("/dash", dashboard.New(registry.New()))
	srv2 := httptest.NewServer(mux)
	defer srv2.Close()
	res, err = c.Get(srv2.URL + "/dash")
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusMovedPermanently, res.StatusCode, "to the folder, where the page's links work")
	assert.Equal(t, "/dash/", res.Header.Get("Location"))
}

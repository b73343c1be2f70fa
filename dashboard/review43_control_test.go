package dashboard_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/dashboard"
	"github.com/resiliencekit/resiliencekit/registry"
)

type review43Rig struct {
	h     *dashboard.Handler
	b     *breaker.Breaker
	asked atomic.Int64
	user  atomic.Value // string
	tok   string
}

func review43NewRig(t *testing.T, opts ...dashboard.Option) *review43Rig {
	rig := &review43Rig{b: breaker.New("victim")}
	rig.user.Store("alice")
	reg := registry.New()
	if err := reg.AddBreaker(rig.b); err != nil {
		t.Fatal(err)
	}
	rig.h = dashboard.New(reg, append([]dashboard.Option{dashboard.WithAuthorizer(func(r *http.Request, a dashboard.Action) (string, error) {
		rig.asked.Add(1)
		return rig.user.Load().(string), nil
	})}, opts...)...)
	rec := httptest.NewRecorder()
	rig.h.ServeHTTP(rec, httptest.NewRequest("GET", "http://dash.internal/", nil))
	m := regexp.MustCompile(`data-token="([0-9a-f]*)"`).FindStringSubmatch(rec.Body.String())
	if m == nil || m[1] == "" {
		t.Fatal("no token on the page")
	}
	rig.tok = m[1]
	t.Cleanup(func() { rig.b.SetMode(context.Background(), breaker.Normal, "cleanup") })
	return rig
}

func (rig *review43Rig) do(req *http.Request) (int, string) {
	rec := httptest.NewRecorder()
	rig.h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

func review43Req(method, target, ctype, body string, hdr map[string]string) *http.Request {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	if ctype != "" {
		r.Header.Set("Content-Type", ctype)
	}
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	return r
}

const review43Form = "application/x-www-form-urlencoded"

// Every way I could think of to force the breaker without the page's
// token, from another site, or with the wrong method or body: refused,
// and the breaker stays normal.
func TestReview43ControlAttacks(t *testing.T) {
	rig := review43NewRig(t)
	tok := rig.tok
	body := "name=victim&mode=forced-open"
	cases := []struct {
		name string
		req  *http.Request
	}{
		{"cross-site form POST, no token", review43Req("POST", "http://dash.internal/api/mode", review43Form, body, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"})},
		{"cross-site with token", review43Req("POST", "http://dash.internal/api/mode", review43Form, body, map[string]string{"Sec-Fetch-Site": "cross-site", "X-CSRF-Token": tok})},
		{"same-site subdomain with token", review43Req("POST", "http://dash.internal/api/mode", review43Form, body, map[string]string{"Sec-Fetch-Site": "same-site", "X-CSRF-Token": tok})},
		{"Origin mismatch, no Sec-Fetch-Site, with token", review43Req("POST", "http://dash.internal/api/mode", review43Form, body, map[string]string{"Origin": "http://evil.example", "X-CSRF-Token": tok})},
		{"Origin null with token", review43Req("POST", "http://dash.internal/api/mode", review43Form, body, map[string]string{"Origin": "null", "X-CSRF-Token": tok})},
		{"GET with query and token", review43Req("GET", "http://dash.internal/api/mode?"+body, "", "", map[string]string{"X-CSRF-Token": tok})},
		{"HEAD with query and token", review43Req("HEAD", "http://dash.internal/api/mode?"+body, "", "", map[string]string{"X-CSRF-Token": tok})},
		{"PUT with token", review43Req("PUT", "http://dash.internal/api/mode", review43Form, body, map[string]string{"X-CSRF-Token": tok})},
		{"lower-case post with token", review43Req("post", "http://dash.internal/api/mode", review43Form, body, map[string]string{"X-CSRF-Token": tok})},
		{"POST with the form in the query, token", review43Req("POST", "http://dash.internal/api/mode?"+body, review43Form, "", map[string]string{"X-CSRF-Token": tok})},
		{"POST mode in body, name in query, token", review43Req("POST", "http://dash.internal/api/mode?name=victim", review43Form, "mode=forced-open", map[string]string{"X-CSRF-Token": tok})},
		{"POST JSON with token", review43Req("POST", "http://dash.internal/api/mode", "application/json", `{"name":"victim","mode":"forced-open"}`, map[string]string{"X-CSRF-Token": tok})},
		{"POST text/plain form body with token", review43Req("POST", "http://dash.internal/api/mode", "text/plain", body, map[string]string{"X-CSRF-Token": tok})},
		{"POST multipart with token", review43Req("POST", "http://dash.internal/api/mode", "multipart/form-data; boundary=X", "--X\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nvictim\r\n--X\r\nContent-Disposition: form-data; name=\"mode\"\r\n\r\nforced-open\r\n--X--\r\n", map[string]string{"X-CSRF-Token": tok})},
		{"POST token in the form", review43Req("POST", "http://dash.internal/api/mode", review43Form, body+"&X-CSRF-Token="+tok+"&token="+tok, nil)},
		{"POST token in a cookie", review43Req("POST", "http://dash.internal/api/mode", review43Form, body, map[string]string{"Cookie": "X-CSRF-Token=" + tok})},
		{"POST upper-case token", review43Req("POST", "http://dash.internal/api/mode", review43Form, body, map[string]string{"X-CSRF-Token": strings.ToUpper(tok)})},
		{"POST token truncated to the MAC", review43Req("POST", "http://dash.internal/api/mode", review43Form, body, map[string]string{"X-CSRF-Token": tok[:64]})},
		{"POST empty token", review43Req("POST", "http://dash.internal/api/mode", review43Form, body, map[string]string{"X-CSRF-Token": ""})},
		{"POST mode with spaces", review43Req("POST", "http://dash.internal/api/mode", review43Form, "name=victim&mode=+forced-open", map[string]string{"X-CSRF-Token": tok})},
		{"POST method override header", review43Req("GET", "http://dash.internal/api/mode?"+body, "", "", map[string]string{"X-HTTP-Method-Override": "POST", "X-CSRF-Token": tok})},
	}
	for _, c := range cases {
		code, resp := rig.do(c.req)
		if code < 400 {
			t.Errorf("%s: %d %s", c.name, code, resp)
		}
		if m := rig.b.Mode().Mode; m != breaker.Normal {
			t.Errorf("%s: the breaker is now %v", c.name, m)
			rig.b.SetMode(context.Background(), breaker.Normal, "t")
		}
		t.Logf("%-50s %d %s", c.name, code, strings.TrimSpace(resp))
	}
	// Another user's token: the authorizer says bob.
	rig.user.Store("bob")
	code, resp := rig.do(review43Req("POST", "http://dash.internal/api/mode", review43Form, body, map[string]string{"X-CSRF-Token": tok}))
	if code != http.StatusForbidden || rig.b.Mode().Mode != breaker.Normal {
		t.Errorf("alice's token for bob: %d %s", code, resp)
	}
	rig.user.Store("alice")
	// And the genuine request works, from the page's origin.
	code, resp = rig.do(review43Req("POST", "http://dash.internal/api/mode", review43Form, body, map[string]string{"X-CSRF-Token": tok, "Sec-Fetch-Site": "same-origin", "Origin": "http://dash.internal"}))
	if code != http.StatusOK || rig.b.Mode().Mode != breaker.ForcedOpen {
		t.Errorf("the genuine control: %d %s, mode %v", code, resp, rig.b.Mode().Mode)
	}
}

// The path tricks: api/mode under any prefix, encoded, with dots; a read
// of the state never changes a mode, and a page path never controls.
func TestReview43ControlPaths(t *testing.T) {
	rig := review43NewRig(t)
	for _, target := range []string{
		"http://dash.internal/api/mode/",
		"http://dash.internal/api/mode;x",
		"http://dash.internal/api/modes",
		"http://dash.internal/api/state?name=victim&mode=forced-open",
		"http://dash.internal/?name=victim&mode=forced-open",
	} {
		code, _ := rig.do(review43Req("POST", target, review43Form, "name=victim&mode=forced-open", map[string]string{"X-CSRF-Token": rig.tok}))
		if m := rig.b.Mode().Mode; m != breaker.Normal {
			t.Errorf("%s (%d): the breaker is %v", target, code, m)
		}
	}
	// An encoded slash still reaches the control (documented: any path
	// ending in api/mode); with the token it works, as it should.
	code, _ := rig.do(review43Req("POST", "http://dash.internal/x/api%2Fmode", review43Form, "name=victim&mode=forced-open", map[string]string{"X-CSRF-Token": rig.tok}))
	t.Logf("api%%2Fmode: %d, mode %v", code, rig.b.Mode().Mode)
}

// Read-only: without an authorizer nothing passes, even with a token made
// by another handler (the secret is per handler).
func TestReview43ReadOnlyAndForeignTokens(t *testing.T) {
	rig := review43NewRig(t)
	reg := registry.New()
	_ = reg.AddBreaker(rig.b)
	ro := dashboard.New(reg)
	rec := httptest.NewRecorder()
	ro.ServeHTTP(rec, review43Req("POST", "http://dash.internal/api/mode", review43Form, "name=victim&mode=forced-open", map[string]string{"X-CSRF-Token": rig.tok}))
	if rec.Code != http.StatusForbidden || rig.b.Mode().Mode != breaker.Normal {
		t.Errorf("read-only: %d", rec.Code)
	}
	rec = httptest.NewRecorder()
	ro.ServeHTTP(rec, httptest.NewRequest("GET", "http://dash.internal/", nil))
	if strings.Contains(rec.Body.String(), `data-controls="1"`) || regexp.MustCompile(`data-token="[0-9a-f]+"`).MatchString(rec.Body.String()) {
		t.Error("a read-only page shows controls or a token")
	}
	// A second handler (another replica behind the same load balancer):
	// alice's token from the first is refused.
	other := dashboard.New(reg, dashboard.WithAuthorizer(func(*http.Request, dashboard.Action) (string, error) { return "alice", nil }))
	rec = httptest.NewRecorder()
	other.ServeHTTP(rec, review43Req("POST", "http://dash.internal/api/mode", review43Form, "name=victim&mode=forced-open", map[string]string{"X-CSRF-Token": rig.tok}))
	b, _ := io.ReadAll(rec.Body)
	var e map[string]string
	_ = json.Unmarshal(b, &e)
	t.Logf("a token of another handler (replica): %d %v", rec.Code, e)
}

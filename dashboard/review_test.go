package dashboard_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/resiliencekit/resiliencekit/dashboard"
	"github.com/resiliencekit/resiliencekit/registry"
)

// Mounted as pprof is, under a prefix that http.StripPrefix removes, a
// path without a trailing slash is redirected; a tab after the first
// slash survives TrimLeft("/\\") and browsers drop it from the Location
// (WHATWG URL parsing strips ASCII tab and newline): "//evil.example/x/",
// an open redirect to another host.
func TestRedirectLeavesTheHost(t *testing.T) {
	h := dashboard.New(registry.New())
	defer h.Close()
	mux := http.NewServeMux()
	mux.Handle("/debug/dashboard/", http.StripPrefix("/debug/dashboard", h))
	req := httptest.NewRequest("GET", "http://dash.example/debug/dashboard/%09/evil.example/x", nil)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	loc := rec.Header().Get("Location")
	browser := strings.NewReplacer("\t", "", "\n", "", "\r", "").Replace(loc) // what a browser parses
	base, _ := url.Parse("http://dash.example/debug/dashboard/x")
	u, err := base.Parse(browser)
	if err != nil {
		t.Fatalf("Location %q: %v", loc, err)
	}
	if u.Host != "dash.example" {
		t.Errorf("status %d, Location %q sends a browser to host %q", rec.Code, loc, u.Host)
	}
}

package dashboard_test

import (
	"net/http/httptest"
	"testing"

	"github.com/resiliencekit/resiliencekit/dashboard"
	"github.com/resiliencekit/resiliencekit/registry"
)

func TestReview43AllowedHostsForms(t *testing.T) {
	cases := []struct {
		allowed []string
		host    string
		want    bool
	}{
		{[]string{"dash.internal"}, "dash.internal", true},
		{[]string{"dash.internal"}, "DASH.Internal.:8080", true},
		{[]string{"dash.internal"}, "dash.internal..", false},
		{[]string{"dash.internal"}, "evil.example", false},
		{[]string{"dash.internal"}, "dash.internal.evil.example", false},
		{[]string{"dash.internal"}, "", false},
		{[]string{"10.0.0.7"}, "10.0.0.7:80", true},
		{[]string{"::1"}, "[::1]:8080", true},
		{[]string{"::1"}, "[::1]", true},
		{[]string{"[::1]"}, "[::1]:8080", true},             // as a URL writes it
		{[]string{"dash.internal."}, "dash.internal", true}, // a fully qualified name
		{[]string{"Dash.Internal"}, "dash.internal", true},
	}
	for _, c := range cases {
		h := dashboard.New(registry.New(), dashboard.AllowedHosts(c.allowed...))
		r := httptest.NewRequest("GET", "/api/state", nil)
		r.Host = c.host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		got := rec.Code != 421
		if got != c.want {
			t.Errorf("AllowedHosts(%q), Host %q: allowed %v, want %v", c.allowed, c.host, got, c.want)
		}
	}
}

package dashboard_test

import (
	"net/http/httptest"
	"testing"

	"github.com/resiliencekit/resiliencekit/dashboard"
	"github.com/resiliencekit/resiliencekit/registry"
)

func TestReview46_AllowedHostsNormalised(t *testing.T) {
	cases := []struct {
		allowed []string
		host    string
		ok      bool
	}{
		{[]string{"[::1]"}, "[::1]:8080", true},
		{[]string{"::1"}, "[::1]:8080", true},
		{[]string{"[::1]"}, "[::1]", true},
		{[]string{"::1"}, "[::1]", true},
		{[]string{"Dash.Internal."}, "dash.internal:443", true},
		{[]string{"dash.internal"}, "DASH.INTERNAL.", true},
		{[]string{"dash.internal"}, "DASH.INTERNAL.:80", true},
		{[]string{"dash.internal"}, "dash.internal..", false},
		{[]string{"dash.internal"}, "evil.example", false},
		{[]string{"dash.internal"}, "dash.internal.evil.example", false},
		{[]string{"dash.internal"}, "", false},
		{[]string{"dash.internal"}, ":80", false},
		{[]string{"10.0.0.7"}, "10.0.0.7:80", true},
		{[]string{"10.0.0.7"}, "[10.0.0.7]:80", true},
		{[]string{"10.0.0.7"}, "10.0.0.7.:80", true},
		{[]string{"fe80::1%eth0"}, "[fe80::1%25eth0]:80", false},
		{[]string{"dash.internal:8080"}, "dash.internal:8080", false}, // a port given to AllowedHosts
		{[]string{}, "dash.internal", false},
		{[]string{""}, "", true},
	}
	for _, c := range cases {
		h := dashboard.New(registry.New(), dashboard.AllowedHosts(c.allowed...))
		r := httptest.NewRequest("GET", "/api/state", nil)
		r.Host = c.host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		got := w.Code != 421
		if got != c.ok {
			t.Errorf("AllowedHosts(%q), Host %q: allowed %v, want %v (status %d)", c.allowed, c.host, got, c.ok, w.Code)
		}
	}
}

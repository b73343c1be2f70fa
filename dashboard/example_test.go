package dashboard_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/dashboard"
	"github.com/resiliencekit/resiliencekit/registry"
)

// onCall stands for a service's own authentication.
func onCall(r *http.Request) (string, bool) {
	user := r.Header.Get("X-User")
	return user, user == "alice"
}

func ExampleNew() {
	reg := registry.New()
	b := breaker.New("payments")
	_ = reg.AddBreaker(b)
	defer runtime.KeepAlive(b) // the registry holds it weakly

	mux := http.NewServeMux()
	dash := dashboard.New(reg,
		dashboard.WithAuthorizer(func(r *http.Request, a dashboard.Action) (string, error) {
			user, ok := onCall(r) // your own authentication
			if !ok {
				return "", errors.New("only the engineer on call may force a breaker")
			}
			return user, nil // goes into the event of the change
		}),
		dashboard.AllowedHosts("dash.internal"), // see Security
	)
	mux.Handle("/debug/resilience/", dash)
	srv := &http.Server{Addr: ":8080", Handler: mux}
	srv.RegisterOnShutdown(dash.Close) // ends the open pages' event streams

	ts := httptest.NewUnstartedServer(nil)
	ts.Config = srv
	ts.Start()
	defer ts.Close()
	get := func(path string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, ts.URL+path, nil)
		req.Host = "dash.internal"
		res, _ := http.DefaultClient.Do(req)
		return res
	}

	res := get("/debug/resilience/api/state")
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	fmt.Println(strings.Contains(string(body), `"name":"payments","state":"closed"`))

	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/debug/resilience/api/mode", strings.NewReader("name=payments&mode=forced-open"))
	req.Host = "dash.internal"
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-User", "bob") // with no token: the page gave bob none
	res, _ = http.DefaultClient.Do(req)
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	fmt.Print(res.StatusCode, " ", string(body))

	rebound, _ := http.NewRequest(http.MethodGet, ts.URL+"/debug/resilience/", nil)
	rebound.Host = "evil.example" // a DNS rebinding page
	res, _ = http.DefaultClient.Do(rebound)
	res.Body.Close()
	fmt.Println(res.StatusCode)
	// Output:
	// true
	// 403 {"error":"missing or wrong CSRF token: reload the page"}
	// 421
}

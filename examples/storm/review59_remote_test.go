package main

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

// TestReview59RemoteRequestAfterEnd: a request of a run that reaches the
// backends' process after the run ended (an attempt its caller abandoned,
// still in flight) makes the run's backend again: its workers are never
// stopped (no end will come) and its request is counted nowhere.
func TestReview59RemoteRequestAfterEnd(t *testing.T) {
	bs := newBackends()
	h := bs.httpHandler()
	start := time.Now()
	hdr := func(r *http.Request) {
		r.Header.Set(headerRun, "review59-1")
		r.Header.Set(headerScenario, "heavytail")
		r.Header.Set(headerStart, strconv.FormatInt(start.UnixNano(), 10))
		r.Header.Set(headerSeed, "1")
		r.Header.Set(headerCall, "1")
		r.Header.Set(headerAttempt, "1")
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	hdr(r)
	h.ServeHTTP(httptest.NewRecorder(), r)
	end := httptest.NewRequest(http.MethodPost, endPath, nil)
	hdr(end)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, end)
	t.Logf("counts at end: %q", w.Body.String())
	late := httptest.NewRequest(http.MethodGet, "/", nil)
	hdr(late)
	h.ServeHTTP(httptest.NewRecorder(), late)
	bs.mu.Lock()
	n := len(bs.runs)
	bs.mu.Unlock()
	if n != 0 {
		t.Errorf("a request after the run's end made its backend again (%d runs live, workers never stopped; its request counted nowhere)", n)
	}
	for _, b := range bs.runs {
		b.close()
	}
}

package idempotency

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// r151Serve serves one request with key through h, recovering a panic,
// and returns the response and whether the handler chain panicked.
func r151Serve(h http.Handler, key string) (rr *httptest.ResponseRecorder, panicked bool) {
	rr = httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("body"))
	req.Header.Set(Header, key)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if r := recover(); r != nil {
				panicked = true
			}
		}()
		h.ServeHTTP(rr, req)
	}()
	<-done
	return rr, panicked
}

// (c): a handler that panics, or calls runtime.Goexit, after writing a
// status: its 500 is saved behind, the panic goes on after one
// StoreTimeout, and no repeat runs the handler again meanwhile or after.
func TestReview151PanicAfterStatusSavedBehindNeverRunsTwice(t *testing.T) {
	for _, how := range []string{"panic", "goexit", "badstatus", "hang"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newR151Store()
				var runs atomic.Int32
				mw := Middleware(s, SharedKeys(), WithLogger(r151Quiet()))
				h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					runs.Add(1)
					w.WriteHeader(http.StatusCreated)
					_, _ = w.Write([]byte("created"))
					switch how {
					case "panic":
						panic("boom")
					case "goexit":
						runtime.Goexit()
					case "badstatus":
						w.WriteHeader(1000)
					case "hang": // the store freezes as the handler runs; back in 5 s
						s.mode.Store(r151Hang)
						time.AfterFunc(5*time.Second, func() { s.mode.Store(r151Healthy) })
						panic("boom")
					}
				}))
				s.failCompletes.Store(4) // the save fails 4 tries, then goes through
				start := time.Now()
				_, panicked := r151Serve(h, "k1")
				took := time.Since(start)
				if how != "goexit" && !panicked {
					t.Errorf("the panic did not go on")
				}
				if took > 600*time.Millisecond {
					t.Errorf("the handler's end was held %v by a failing save (want one StoreTimeout)", took)
				}
				rr, _ := r151Serve(h, "k1") // while the save goes on
				if rr.Code != http.StatusConflict {
					t.Errorf("repeat during the save behind: %d, want 409", rr.Code)
				}
				time.Sleep(40 * time.Second)
				rr, _ = r151Serve(h, "k1")
				if rr.Code != http.StatusInternalServerError || rr.Header().Get(ReplayedHeader) != "true" {
					t.Errorf("repeat after the save: %d replayed %q, want a replayed 500", rr.Code, rr.Header().Get(ReplayedHeader))
				}
				if n := runs.Load(); n != 1 {
					t.Errorf("the handler ran %d times", n)
				}
			})
		})
	}
}

// A save behind that never goes through (store refuses Complete for
// good): the key stays claimed for the lease at least; no repeat runs
// within it.
func TestReview151PanicSaveNeverThroughHoldsKeyForLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newR151Store()
		var runs atomic.Int32
		mw := Middleware(s, SharedKeys(), WithLogger(r151Quiet()), FailOpenAfter(-1))
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.WriteHeader(http.StatusCreated)
			panic("boom")
		}))
		s.failCompletes.Store(1 << 30)
		r151Serve(h, "k")
		for range 25 {
			time.Sleep(time.Second)
			r151Serve(h, "k")
		}
		if n := runs.Load(); n != 1 {
			t.Errorf("the handler ran %d times within the lease while its 500's save failed", n)
		}
		time.Sleep(2 * time.Minute)
	})
}

// A status outside 100..999 panics at once, before anything is held: the
// key is freed (nothing was sent) and nothing with that status is stored.
func TestReview151BadStatusFreesKey(t *testing.T) {
	for _, code := range []int{0, 99, 1000, -1} {
		synctest.Test(t, func(t *testing.T) {
			s := newR151Store()
			var runs atomic.Int32
			mw := Middleware(s, SharedKeys(), WithLogger(r151Quiet()))
			h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if runs.Add(1) == 1 {
					w.WriteHeader(code)
				}
				w.WriteHeader(http.StatusCreated)
			}))
			_, panicked := r151Serve(h, "k")
			if !panicked {
				t.Errorf("WriteHeader(%d) did not panic", code)
			}
			rr, _ := r151Serve(h, "k")
			if rr.Code != http.StatusCreated || runs.Load() != 2 {
				t.Errorf("WriteHeader(%d): repeat got %d, runs %d; want the key freed and a run", code, rr.Code, runs.Load())
			}
		})
	}
}

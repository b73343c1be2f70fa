package idempotencystore_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/sql/idempotencystore"
)

// TestReview159_FrozenDatabaseFailsOpenWithinItsBound: PostgreSQL is
// frozen (SIGSTOP: connections accepted by the kernel, never answered).
// The promise (FailOpenAfter): keyed requests are refused (503) for at
// most FailOpenAfter and a few seconds, then run on the process's own
// records; once the database is thawed, no request fails (a plain server
// would have completed every one), and the guard is back on the store: a
// key run then is replayed by another replica.
func TestReview159_FrozenDatabaseFailsOpenWithinItsBound(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		http.DefaultClient.CloseIdleConnections()
		goleak.VerifyNone(t, ignore)
	})
	s := startPostgres(t)
	db := r159Open(t, s)
	st := idempotencystore.New(db, "r159_failopen")
	ctx := context.Background()
	if err := st.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "ok")
	})
	opts := []idempotency.Option{idempotency.SharedKeys(), idempotency.FailOpenAfter(time.Second),
		idempotency.StoreTimeout(150 * time.Millisecond), idempotency.Lease(1500 * time.Millisecond)}
	a := httptest.NewServer(idempotency.Middleware(st, opts...)(h))
	defer a.Close()
	client := &http.Client{Timeout: 4 * time.Second}
	post := func(url, key string) (int, http.Header) {
		req, _ := http.NewRequest("POST", url, strings.NewReader("x"))
		req.Header.Set("Idempotency-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			return -1, nil
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, resp.Header
	}
	if code, _ := post(a.URL, "warm"); code != 201 {
		t.Fatalf("warm-up: %d", code)
	}

	s.Freeze()
	frozen := time.Now()
	thawed := false
	defer func() {
		if !thawed {
			s.Thaw()
		}
	}()
	var lastRefused time.Time
	var ranLocally []string
	i := 0
	for time.Since(frozen) < 3500*time.Millisecond {
		i++
		code, _ := post(a.URL, fmt.Sprintf("frozen-%d", i))
		switch code {
		case 201:
			ranLocally = append(ranLocally, fmt.Sprintf("frozen-%d", i))
		case 503:
			lastRefused = time.Now()
		default:
			t.Errorf("request %d while frozen: %d", i, code)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if lastRefused.IsZero() {
		t.Log("no request refused while frozen")
	} else if d := lastRefused.Sub(frozen); d > 2500*time.Millisecond {
		t.Errorf("requests refused until %v after the freeze: FailOpenAfter is 1s", d)
	}

	s.Thaw()
	thawed = true
	after := time.Now()
	failedAfter := 0
	for time.Since(after) < 3*time.Second {
		i++
		if code, _ := post(a.URL, fmt.Sprintf("thawed-%d", i)); code != 201 {
			failedAfter++
			t.Logf("request %d, %v after the thaw: %d", i, time.Since(after).Round(time.Millisecond), code)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if failedAfter > 0 {
		t.Errorf("%d requests failed after the database was thawed", failedAfter)
	}
	// A key run on A's own records while frozen is replayed by A, then and after.
	for _, key := range ranLocally {
		before := runs.Load()
		code, hdr := post(a.URL, key)
		if code != 201 || hdr.Get("Idempotent-Replayed") != "true" || runs.Load() != before {
			t.Errorf("%s, run on A while the database was frozen, repeated to A after the thaw: %d, replayed %q, ran again %v",
				key, code, hdr.Get("Idempotent-Replayed"), runs.Load() != before)
			break
		}
	}
	// Back on the store: a key run now on A is replayed by another replica.
	if code, _ := post(a.URL, "back-1"); code != 201 {
		t.Fatalf("back-1: %d", code)
	}
	b := httptest.NewServer(idempotency.Middleware(st, opts...)(h))
	defer b.Close()
	before := runs.Load()
	code, hdr := post(b.URL, "back-1")
	if code != 201 || hdr.Get("Idempotent-Replayed") != "true" || runs.Load() != before {
		t.Errorf("3 s after the thaw, a key run on A was not replayed by B (%d, replayed %q, ran again %v): A still runs on its own records",
			code, hdr.Get("Idempotent-Replayed"), runs.Load() != before)
	}
	a.Close()
	b.Close()
	client.CloseIdleConnections()
	db.Close()
}

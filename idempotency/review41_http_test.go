package idempotency

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Over HTTP: an order was made (201); a client's retries of it arrive
// together with a request that reuses the key for another body. The
// retries that wait on that one get the 201 replayed, as each alone
// would, not 422 (final).
func TestReview41_HTTPRetriesBehindAWrongBodyGet422(t *testing.T) {
	s := newR41Store()
	var runs int
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "order 42")
	})
	srv := httptest.NewServer(Middleware(s, SharedKeys(), WithLogger(r41Quiet))(h))
	defer srv.Close()
	post := func(body string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", "k1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := post(`{"qty":1}`); c != 201 {
		t.Fatal(c)
	}
	s.beginHook = func(ctx context.Context, n int64, _ string, _ Record) error {
		time.Sleep(100 * time.Millisecond) // a store slower than usual
		return nil
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); post(`{"qty":2}`) }()
	time.Sleep(30 * time.Millisecond)
	codes := make([]int, 20)
	for i := range codes {
		wg.Add(1)
		go func() { defer wg.Done(); codes[i] = post(`{"qty":1}`) }()
	}
	wg.Wait()
	bad := 0
	for _, c := range codes {
		if c != 201 {
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d retries of the made order refused: %v (runs %d)", bad, len(codes), codes, runs)
	}
}

package httpclient_test

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// review170: the baseline of TestReview170StalledBodyClosedOnce: plain
// net/http closes a stalled caller's body at most once.
func TestReview170PlainNetHTTPClosesAtMostOnce(t *testing.T) {
	srv := newR170Server(t, func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 1<<10)
		for {
			if _, err := r.Body.Read(buf); err != nil {
				return
			}
		}
	})
	for _, tc := range []struct {
		name   string
		length int64
	}{{"known", 100}, {"unknown", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			body := newR170Blocking("0123456789")
			// Ends net/http's writer, blocked in Read, uncounted.
			unblock := time.AfterFunc(time.Second, func() { body.once.Do(func() { close(body.done) }) })
			defer unblock.Stop()
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPut, srv, body)
			req.ContentLength = tc.length
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr}).Do(req)
			if err == nil {
				resp.Body.Close()
			}
			time.Sleep(300 * time.Millisecond)
			if c := body.closes.Load(); c > 1 {
				t.Errorf("plain net/http closed the body %d times", c)
			} else {
				t.Logf("plain net/http closed the body %d times", c)
			}
		})
	}
}

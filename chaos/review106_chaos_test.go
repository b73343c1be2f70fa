package chaos_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/chaos"
)

func TestReview106OutsideBubbleBucketsAndDrops(t *testing.T) {
	b := chaos.New(100*time.Millisecond, nil) // outside the bubble
	synctest.Test(t, func(t *testing.T) {
		if l := b.Load(); len(l) > 1 {
			t.Errorf("Load before any request in the bubble: %d buckets", len(l))
		}
		time.Sleep(time.Second)
		b.SetCapacity(2)
		b.SetDropResponse(true)
		c := &http.Client{Transport: b.Transport()}
		for range 5 {
			if resp, err := c.Get("http://chaos/"); err == nil {
				resp.Body.Close()
			}
		}
		b.SetDropResponse(false)
		b.Recover(0, time.Second)
		for range 5 {
			rec := httptest.NewRecorder()
			b.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
			if rec.Code != 200 {
				t.Errorf("Recover(0) unlimited: got %d", rec.Code)
			}
		}
		time.Sleep(250 * time.Millisecond)
		l := b.Load()
		total, ok := 0, 0
		for _, bk := range l {
			total += bk.Requests
			ok += bk.OK
		}
		if total != 10 || ok != 7 {
			t.Errorf("requests %d ok %d, want 10 and 7 (2 dropped within the capacity, 5 unlimited)", total, ok)
		}
		if got := l[len(l)-1].Start; !got.Add(100 * time.Millisecond).After(time.Now()) {
			t.Errorf("Load does not run to now: last bucket %v, now %v", got, time.Now())
		}
		if l[0].Requests != 0 && len(l) < 3 {
			t.Errorf("buckets: %+v", l)
		}
		if b.Processed() != 7 {
			t.Errorf("processed %d", b.Processed())
		}
	})
}

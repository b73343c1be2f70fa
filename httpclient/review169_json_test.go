package httpclient_test

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
)

// The README's Client: PostJSON with a key, GetJSON of a gzip answer and
// of a large one, all against a healthy server slow to its first byte.
func TestReview169_JSONClientHealthy(t *testing.T) {
	var posts atomic.Int64
	big := strings.Repeat("x", 5<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(400 * time.Millisecond)
		switch r.URL.Path {
		case "/orders":
			posts.Add(1)
			var in struct{ Key string }
			if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			w.WriteHeader(http.StatusCreated)
			json.NewEncoder(w).Encode(map[string]int{"ID": 7})
		case "/gz":
			w.Header().Set("Content-Encoding", "gzip")
			gz := gzip.NewWriter(w)
			json.NewEncoder(gz).Encode(map[string]string{"v": "zipped"})
			gz.Close()
		case "/big":
			json.NewEncoder(w).Encode(map[string]string{"v": big})
		}
	}))
	defer srv.Close()
	b := breaker.New("review169-json-healthy")
	c := httpclient.New(httpclient.WithPipeline(review169QuickStart(b)))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var created struct{ ID int }
	if err := c.PostJSON(ctx, srv.URL+"/orders", map[string]string{"Key": "k1"}, &created, httpclient.IdempotencyKey("k1")); err != nil || created.ID != 7 {
		t.Errorf("PostJSON: %v %v", created, err)
	}
	if err := c.PostJSON(ctx, srv.URL+"/orders", map[string]string{"Key": "k2"}, &created); err != nil {
		t.Errorf("PostJSON without key: %v", err)
	}
	if n := posts.Load(); n != 2 {
		t.Errorf("server got %d POSTs for 2 calls", n)
	}
	var gz struct{ V string }
	if err := c.GetJSON(ctx, srv.URL+"/gz", &gz); err != nil || gz.V != "zipped" {
		t.Errorf("GetJSON gzip: %v %v", gz, err)
	}
	var bg struct{ V string }
	if err := c.GetJSON(ctx, srv.URL+"/big", &bg); err != nil || bg.V != big {
		t.Errorf("GetJSON big: %d %v", len(bg.V), err)
	}
}

package httpclient_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// A redirect net/http cannot follow because of the dependency's own
// answer (a Location that does not parse, or one to a scheme it does not
// speak) is, like one the policy refuses, a 3xx not followed that no retry
// changes: not transient (retried at every layer above), and not the
// caller's own fault (rejected: 500, uncounted), which would hide the
// dependency's.
func TestReview161_RedirectUnfollowable(t *testing.T) {
	for _, loc := range []string{"http://[::1", "ftp://example.com/x", "http:///nohost"} {
		t.Run(loc, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Location", loc)
				w.WriteHeader(http.StatusFound)
			}))
			defer srv.Close()
			c := httpclient.New(httpclient.WithPipeline(review161Pipeline()))
			err := c.GetJSON(context.Background(), srv.URL, new(map[string]any))
			if err == nil {
				t.Fatal("no error")
			}
			cl := resilience.Classify(err)
			var se *httpclient.StatusError
			t.Logf("class %v status %d retried %v StatusError %v: %v", cl, retrysignal.Status(err), retrysignal.Retried(err), errors.As(err, &se), err)
			if cl == resilience.ClassTransient || cl == resilience.ClassRejected {
				t.Errorf("Location %q: class %v (Status %d): the dependency's 3xx not followed", loc, cl, retrysignal.Status(err))
			}
		})
	}
}

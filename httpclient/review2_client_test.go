package httpclient_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/resiliencekit/resiliencekit/httpclient"
)

type r2rt func(*http.Request) (*http.Response, error)

func (f r2rt) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A Base that answers without setting Response.Request (as many fakes
// do): the Client's failed() reads resp.Request.Header and panics.
// Pre-existing (it read resp.Request.URL before), noted only.
func TestReview2ClientBaseWithoutResponseRequest(t *testing.T) {
	c := httpclient.New(httpclient.Base(r2rt(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 404, Status: "404 Not Found", Header: http.Header{}, Body: io.NopCloser(strings.NewReader("no"))}, nil
	})))
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("GetJSON panicked: %v", r)
		}
	}()
	err := c.GetJSON(context.Background(), "http://example.invalid/x", nil)
	if err == nil {
		t.Error("no error")
	}
}

package httpclient_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/httpclient"
)

// r170CloseOnce is the common body whose Close unblocks its Read by
// closing a channel: a second Close panics.
type r170CloseOnce struct {
	head []byte
	done chan struct{}
}

func (b *r170CloseOnce) Read(p []byte) (int, error) {
	if len(b.head) > 0 {
		n := copy(p, b.head)
		b.head = b.head[n:]
		return n, nil
	}
	<-b.done
	return 0, errors.New("closed")
}

func (b *r170CloseOnce) Close() error { close(b.done); return nil }

// review170: a PUT of known length whose writer stalls, the caller's
// deadline ends: plain net/http closes the body once; the Transport
// closes it in the AfterFunc and again in bufferBody, and the second
// Close panics on the caller's goroutine, out of http.Client.Do.
func TestReview170StalledKnownLengthCloseNoPanic(t *testing.T) {
	srv := newR170Server(t, func(w http.ResponseWriter, r *http.Request) {})
	hc := &http.Client{Transport: httpclient.NewTransport()}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, srv, &r170CloseOnce{head: []byte("abc"), done: make(chan struct{})})
	req.ContentLength = 100
	var panicked any
	func() {
		defer func() { panicked = recover() }()
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
		}
	}()
	if panicked != nil {
		t.Fatalf("http.Client.Do panicked: %v", panicked)
	}
}

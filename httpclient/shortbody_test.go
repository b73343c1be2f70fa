package httpclient_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// readThenCut is net/http's other outcome for a body shorter than its
// ContentLength: it reads the body to its end, closes the connection, and
// the error that comes back may be the read of the answer it cut.
type readThenCut struct{ n atomic.Int32 }

func (rt *readThenCut) RoundTrip(r *http.Request) (*http.Response, error) {
	rt.n.Add(1)
	_, _ = io.Copy(io.Discard, r.Body)
	r.Body.Close()
	return nil, &net.OpError{Op: "read", Net: "tcp", Err: net.ErrClosed}
}

// A body shorter than its ContentLength is the caller's error whichever
// error net/http returns for it: not retried, not counted (CI, once: the
// read's error came back, the call was retried and its breaker opened).
func TestShortBodyWhateverNetHTTPSays(t *testing.T) {
	for _, buffered := range []int64{0, 1 << 10} {
		t.Run(fmt.Sprint("MaxBufferedBody=", buffered), func(t *testing.T) { shortBody(t, buffered) })
	}
}

func shortBody(t *testing.T, buffered int64) {
	rt := &readThenCut{}
	b := breaker.New("dep", breaker.ConsecutiveFailures(1))
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.Base(rt), httpclient.MaxBufferedBody(buffered), fastRetry(pipeline.WithBreaker(b)))}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPut, "http://127.0.0.1:1/", strings.NewReader("abc"))
	req.ContentLength = 10
	resp, err := hc.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	require.Error(t, err)
	assert.LessOrEqual(t, rt.n.Load(), int32(1), "attempts") // buffered: known short, not sent
	assert.Equal(t, resilience.ClassRejected, resilience.Classify(err))
	assert.Zero(t, b.Counts().TotalFailures)
	assert.Equal(t, resilience.StateClosed, b.State())
}

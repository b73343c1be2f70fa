package httpclient_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// fastBody is a stream that gives bytes at once (no WriterTo: net/http
// reads it as it would a caller's pipe).
type fastBody struct{ left int64 }

func (b *fastBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), b.left))
	clear(p[:n])
	b.left -= int64(n)
	return n, nil
}

func (b *fastBody) Close() error { return nil }

// The other side of TestReview169_SlowCallerBodyDoesNotCount: a server that
// reads an upload slowly (overloaded) while the caller's body gives bytes
// at once. The attempt's time runs out as net/http waits on the server,
// not on the caller's body: a failure of the dependency's, counted.
func TestSlowServerReadingABodyCounts(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 16<<10)
		for end := time.Now().Add(time.Second); time.Now().Before(end); { // what the socket holds would take seconds
			if _, err := r.Body.Read(buf); err != nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}))
	defer srv.Close()
	for _, method := range []string{http.MethodPut, http.MethodPost} {
		t.Run(method, func(t *testing.T) {
			b := breaker.New("slow-server", breaker.ConsecutiveFailures(3))
			p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))),
				pipeline.WithTimeBudget(300*time.Millisecond))
			hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p))}
			for range 3 {
				req, err := http.NewRequestWithContext(context.Background(), method, srv.URL, &fastBody{left: 256 << 20})
				require.NoError(t, err)
				req.ContentLength = -1
				resp, err := hc.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				require.Error(t, err)
				require.NotEqual(t, resilience.ClassRejected, resilience.Classify(err), "%v", err)
			}
			require.Equal(t, resilience.StateOpen, b.State())
		})
	}
}

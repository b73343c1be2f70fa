package httpclient_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// review81CutServer cuts (RST) the upload of the first request after
// cutAt bytes (or every request's, with always), and answers the others
// with the body's length and sha256.
func review81CutServer(t *testing.T, cutAt *atomic.Int64, always bool) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if k := n.Add(1); k == 1 || always {
			_, _ = io.CopyN(io.Discard, r.Body, cutAt.Load())
			c, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			_ = c.(*net.TCPConn).SetLinger(0)
			c.Close()
			return
		}
		h := sha256.New()
		m, err := io.Copy(h, r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		fmt.Fprintf(w, "%d %s", m, hex.EncodeToString(h.Sum(nil)))
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// review81Pipe streams data through a pipe in random pieces.
// review81Data returns size random bytes and their sha256.
func review81Data(rnd *rand.Rand, size int64) ([]byte, [32]byte) {
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(rnd.Uint32())
	}
	return data, sha256.Sum256(data)
}

func review81Pipe(data []byte, rnd *rand.Rand, pause time.Duration) *io.PipeReader {
	pr, pw := io.Pipe()
	seed := rnd.Uint64()
	go func() {
		lr := rand.New(rand.NewPCG(seed, 3))
		for off := 0; off < len(data); {
			n := min(len(data)-off, 1+lr.IntN(20000))
			if _, err := pw.Write(data[off : off+n]); err != nil {
				return
			}
			off += n
			if pause > 0 {
				time.Sleep(pause)
			}
		}
		pw.Close()
	}()
	return pr
}

// A PUT of unknown length whose first upload the server cuts: a body up
// to MaxBufferedBody is retried byte-exact; a longer one fails as the
// caller's (not counted). Sizes around chunk boundaries and the max.
func TestReview81CutReplayExact(t *testing.T) {
	review51Leak(t)
	const max = 200000
	sizes := []int64{0, 1, 4095, 4096, 4097, 12287, 12288, 12289, 28672, 61439, 61440, 61441, 126976, 126977, max - 1, max, max + 1, 300000}
	rnd := rand.New(rand.NewPCG(8181, uint64(time.Now().UnixNano())))
	var cutAt atomic.Int64
	stats := map[string]int{}
	for rep := 0; rep < 3; rep++ {
		for _, size := range sizes {
			srv, _ := review81CutServer(t, &cutAt, false)
			cutAt.Store(rnd.Int64N(size + 1))
			br := breaker.New("r81", breaker.ConsecutiveFailures(1))
			tr := httpclient.NewTransport(httpclient.MaxBufferedBody(max), httpclient.WithPipeline(pipeline.New(
				pipeline.WithBreaker(br), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))))),
				httpclient.Base(&http.Transport{}))
			data, sum := review81Data(rnd, size)
			body := review81Pipe(data, rnd, 0)
			req, _ := http.NewRequest(http.MethodPut, srv.URL, body)
			if rnd.IntN(2) == 0 {
				req.ContentLength = -1
			}
			resp, err := tr.RoundTrip(req)
			if err == nil {
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				want := fmt.Sprintf("%d %s", size, hex.EncodeToString(sum[:]))
				if string(got) != want {
					t.Errorf("size %d cut at %d: server got %q, want %q", size, cutAt.Load(), got, want)
				}
				stats["ok"]++
				if size > max {
					stats["ok over max (the cut came after the end?)"]++
				}
			} else {
				c := resilience.Classify(err)
				key := fmt.Sprintf("err class %v notRetried=%v", c, errors.Is(err, httpclient.ErrBodyNotRetried))
				stats[key]++
				if size <= max {
					t.Errorf("size %d (<= max) cut at %d: %v", size, cutAt.Load(), err)
				}
				if cnt := br.Counts(); cnt.TotalFailures != 0 {
					t.Errorf("size %d cut at %d: the breaker counted %d failures (%v, class %v)", size, cutAt.Load(), cnt.TotalFailures, err, c)
				}
			}
			body.Close()
			tr.CloseIdleConnections()
		}
	}
	t.Logf("outcomes: %v", stats)
}

// The server cuts every upload: a body over the max, or one whose writer
// is too slow to end within DrainTimeout, is sent once and never counted;
// one that fits is retried (its cuts then count, as documented).
func TestReview81CutAlwaysSlowOrLong(t *testing.T) {
	review51Leak(t)
	rnd := rand.New(rand.NewPCG(818, uint64(time.Now().UnixNano())))
	for _, tc := range []struct {
		name  string
		size  int64
		pause time.Duration
	}{{"long", 300000, 0}, {"slow", 150000, 5 * time.Millisecond}} {
		for rep := 0; rep < 4; rep++ {
			var cutAt atomic.Int64
			cutAt.Store(rnd.Int64N(20000))
			srv, hits := review81CutServer(t, &cutAt, true)
			br := breaker.New("r81", breaker.ConsecutiveFailures(1))
			tr := httpclient.NewTransport(httpclient.MaxBufferedBody(200000), httpclient.WithPipeline(pipeline.New(
				pipeline.WithBreaker(br), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))))),
				httpclient.Base(&http.Transport{}))
			data := make([]byte, tc.size)
			body := review81Pipe(data, rnd, tc.pause)
			req, _ := http.NewRequest(http.MethodPut, srv.URL, body)
			start := time.Now()
			_, err := tr.RoundTrip(req)
			el := time.Since(start)
			if err == nil {
				t.Fatalf("%s: no error", tc.name)
			}
			c := resilience.Classify(err)
			if c != resilience.ClassRejected || br.Counts().TotalFailures != 0 || hits.Load() != 1 {
				t.Errorf("%s rep %d cut at %d: class %v, breaker failures %d state %v, attempts %d, %v", tc.name, rep, cutAt.Load(), c, br.Counts().TotalFailures, br.State(), hits.Load(), err)
			}
			if el > time.Second {
				t.Errorf("%s: took %v", tc.name, el)
			}
			body.Close()
			tr.CloseIdleConnections()
		}
	}
}

// The body fails to read during the read ahead after a cut: not sent
// again, the cut not counted.
func TestReview81CutThenBodyFails(t *testing.T) {
	review51Leak(t)
	for rep := 0; rep < 6; rep++ {
		var cutAt atomic.Int64
		cutAt.Store(1000)
		srv, hits := review81CutServer(t, &cutAt, false)
		br := breaker.New("r81", breaker.ConsecutiveFailures(1))
		tr := httpclient.NewTransport(httpclient.WithPipeline(pipeline.New(
			pipeline.WithBreaker(br), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))))),
			httpclient.Base(&http.Transport{}))
		pr, pw := io.Pipe()
		go func() {
			buf := make([]byte, 8192)
			for i := 0; i < 60; i++ { // ~480 KB, more than the socket takes at once
				if _, err := pw.Write(buf); err != nil {
					return
				}
			}
			pw.CloseWithError(errors.New("review81: encoder failed"))
		}()
		req, _ := http.NewRequest(http.MethodPut, srv.URL, pr)
		_, err := tr.RoundTrip(req)
		if err == nil {
			t.Fatal("no error")
		}
		if br.Counts().TotalFailures != 0 || hits.Load() > 1 && resilience.Classify(err) != resilience.ClassRejected {
			t.Errorf("rep %d: breaker failures %d, attempts %d, class %v: %v", rep, br.Counts().TotalFailures, hits.Load(), resilience.Classify(err), err)
		}
		if hits.Load() > 1 && !strings.Contains(err.Error(), "encoder failed") {
			t.Logf("rep %d: attempts %d: %v", rep, hits.Load(), err)
		}
		tr.CloseIdleConnections()
	}
}

package httpclient_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// review81Echo answers each line of the request body with it, flushed, as
// it reads it: a full-duplex exchange.
func review81Echo(t *testing.T, h2 bool) *httptest.Server {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if !h2 {
			if err := rc.EnableFullDuplex(); err != nil {
				t.Error(err)
			}
		}
		w.WriteHeader(200)
		rc.Flush()
		sc := bufio.NewScanner(r.Body)
		for sc.Scan() {
			fmt.Fprintf(w, "echo %s\n", sc.Text())
			rc.Flush()
		}
	}))
	if h2 {
		srv.EnableHTTP2 = true
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv
}

func review81Duplex(ctx context.Context, rt http.RoundTripper, url, method string, rounds int, cancelAfter bool, cancel func()) error {
	pr, pw := io.Pipe()
	req, _ := http.NewRequestWithContext(ctx, method, url, pr)
	req.ContentLength = -1
	req.Header.Set("Idempotency-Key", "k81")
	resp, err := rt.RoundTrip(req)
	if err != nil {
		pw.Close()
		return err
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for i := 0; i < rounds; i++ {
		if _, err := fmt.Fprintf(pw, "line %d\n", i); err != nil {
			return fmt.Errorf("round %d write: %w", i, err)
		}
		line, err := br.ReadString('\n')
		if err != nil {
			return fmt.Errorf("round %d read: %w", i, err)
		}
		if line != fmt.Sprintf("echo line %d\n", i) {
			return fmt.Errorf("round %d: %q", i, line)
		}
	}
	pw.Close()
	rest, err := io.ReadAll(br)
	if err != nil || len(rest) != 0 {
		return fmt.Errorf("end: %q %v", rest, err)
	}
	if cancelAfter {
		cancel()
	}
	return nil
}

// Full-duplex PUT and keyed POST over HTTP/2 and HTTP/1.1 with
// EnableFullDuplex, with a time budget and hedging: each completes as it
// does over a plain transport.
func TestReview81DuplexDoNoHarm(t *testing.T) {
	review51Leak(t)
	for _, h2 := range []bool{true, false} {
		srv := review81Echo(t, h2)
		base := srv.Client().Transport.(*http.Transport)
		pipes := map[string]*pipeline.Pipeline{
			"retry":   pipeline.New(pipeline.WithRetry(retrypolicy.New())),
			"budget":  pipeline.New(pipeline.WithRetry(retrypolicy.New()), pipeline.WithTimeBudget(10*time.Second)),
			"hedge":   pipeline.New(pipeline.WithRetry(retrypolicy.New()), pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond)))),
			"attempt": pipeline.New(pipeline.WithRetry(retrypolicy.New()), pipeline.WithAttemptTimeout(5*time.Second)),
		}
		for name, p := range pipes {
			tr := httpclient.NewTransport(httpclient.Base(base), httpclient.WithPipeline(p))
			for _, method := range []string{http.MethodPut, http.MethodPost} {
				var wg sync.WaitGroup
				var mu sync.Mutex
				fails := 0
				var first error
				for g := 0; g < 20; g++ {
					wg.Go(func() {
						ctx, cancel := context.WithCancel(context.Background())
						defer cancel()
						err := review81Duplex(ctx, tr, srv.URL, method, 30, g%2 == 0, cancel)
						if err != nil {
							mu.Lock()
							fails++
							if first == nil {
								first = err
							}
							mu.Unlock()
						}
					})
				}
				wg.Wait()
				if fails > 0 {
					t.Errorf("h2=%v %s %s: %d of 20 exchanges failed: %v", h2, name, method, fails, first)
				}
			}
		}
		// plain, for reference
		if err := review81Duplex(context.Background(), base, srv.URL, http.MethodPut, 30, false, nil); err != nil {
			t.Fatalf("plain h2=%v: %v", h2, err)
		}
		base.CloseIdleConnections()
	}
}

// The caller's context ends as the answer arrives (its deadline): the
// caller then reads the answer's body. Over a plain transport and the
// toolkit, the outcomes should be alike: count them.
func TestReview81CtxEndsAtAnswer(t *testing.T) {
	review51Leak(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	}))
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	tr := httpclient.NewTransport(httpclient.Base(base))
	count := func(rt http.RoundTripper) (ok, bad, notCtx int, kinds map[string]int) {
		kinds = map[string]int{}
		for i := 0; i < 200; i++ {
			pr, pw := io.Pipe()
			go func() { io.WriteString(pw, strings.Repeat("x", 1000)); pw.Close() }()
			d := time.Duration(i%40) * 25 * time.Microsecond
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Microsecond+d)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL, pr)
			resp, err := rt.RoundTrip(req)
			if err == nil {
				b, rerr := io.ReadAll(resp.Body)
				resp.Body.Close()
				if rerr == nil && len(b) == 1000 {
					ok++
				} else {
					bad++
					kinds[fmt.Sprintf("read body: %v", rerr)]++
				}
			} else {
				kinds[fmt.Sprintf("is ctx.Err()=%v: %v", errors.Is(err, context.DeadlineExceeded), err)]++
				if !errors.Is(err, context.DeadlineExceeded) {
					notCtx++
				}
			}
			pr.Close()
			cancel()
		}
		return
	}
	pOK, pBad, pNot, pk := count(base)
	tOK, tBad, tNot, tk := count(tr)
	if pNot > 0 || tNot > 0 {
		t.Errorf("errors of a request whose deadline passed that are not context.DeadlineExceeded: plain %d of 200, toolkit %d of 200", pNot, tNot)
	}
	t.Logf("plain: ok %d, bad body %d; toolkit: ok %d, bad body %d", pOK, pBad, tOK, tBad)
	for k, v := range tk {
		if len(k) > 160 {
			k = k[:160]
		}
		t.Logf("toolkit %d× %s", v, k)
	}
	for k, v := range pk {
		if len(k) > 160 {
			k = k[:160]
		}
		t.Logf("plain %d× %s", v, k)
	}
}

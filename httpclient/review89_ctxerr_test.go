package httpclient_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// review89_stallListener accepts TCP and never answers (a TLS handshake
// that stalls: a hung dependency).
func review89_stallListener(t *testing.T) (string, *atomic.Int32) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String(), &n
}

func review89_client(base http.RoundTripper) (*http.Client, *breaker.Breaker) {
	b := breaker.New("review89")
	p := pipeline.New(
		pipeline.WithBreaker(b),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(2*time.Millisecond))),
		pipeline.WithTimeBudget(5*time.Second),
	)
	return &http.Client{Transport: httpclient.NewTransport(httpclient.Base(base), httpclient.WithPipeline(p))}, b
}

func review89_check(t *testing.T, name string, hc *http.Client, b *breaker.Breaker, url string, accepts *atomic.Int32) {
	start := time.Now()
	resp, err := hc.Get(url)
	if resp != nil {
		resp.Body.Close()
	}
	c := b.Counts()
	t.Logf("%s: err=%v class=%v accepts=%d took=%v counts=%+v", name, err, resilience.Classify(err), accepts.Load(), time.Since(start), c)
	if accepts.Load() < 3 {
		t.Errorf("%s: a hung dependency (handshake that never ends) was tried %d times, want 3 (GET retried)", name, accepts.Load())
	}
	if c.TotalFailures == 0 {
		t.Errorf("%s: a hung dependency was not counted by the breaker: %+v", name, c)
	}
}

// A tls.Dialer's NetDialer.Timeout bounds the handshake with a context of
// its own: crypto/tls returns a bare context.DeadlineExceeded, which
// net/http hands back as it is, while the attempt's context lasts.
func TestReview89_TLSDialerTimeoutIsADependencyFailure(t *testing.T) {
	addr, accepts := review89_stallListener(t)
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 150 * time.Millisecond}, Config: &tls.Config{InsecureSkipVerify: true}}
	base := &http.Transport{DialTLSContext: d.DialContext}
	// Show what the base returns.
	req, _ := http.NewRequest("GET", "https://"+addr+"/", nil)
	_, err := base.RoundTrip(req)
	t.Logf("base alone: %v (bare DeadlineExceeded: %v)", err, err == context.DeadlineExceeded)
	accepts.Store(0)
	hc, b := review89_client(base)
	review89_check(t, "tls.Dialer timeout", hc, b, "https://"+addr+"/", accepts)
}

// A base of the caller's own that bounds each try (a common wrapper).
type review89_perTry struct {
	inner http.RoundTripper
	d     time.Duration
}

func (p review89_perTry) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(r.Context(), p.d)
	resp, err := p.inner.RoundTrip(r.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	_ = cancel // leaked till the deadline for brevity
	return resp, nil
}

func TestReview89_PerTryTimeoutBaseIsADependencyFailure(t *testing.T) {
	// A server that accepts and never answers the request.
	addr, accepts := review89_stallListener(t)
	base := review89_perTry{inner: &http.Transport{DisableKeepAlives: true}, d: 150 * time.Millisecond}
	req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
	_, err := base.RoundTrip(req)
	t.Logf("base alone: %v (bare: %v)", err, errors.Is(err, context.DeadlineExceeded) && err == context.DeadlineExceeded)
	accepts.Store(0)
	hc, b := review89_client(base)
	review89_check(t, "per-try base", hc, b, "http://"+addr+"/", accepts)
}

// The standard knobs: each must stay transient and counted.
func TestReview89_StandardTimeoutsStayCounted(t *testing.T) {
	t.Run("ResponseHeaderTimeout", func(t *testing.T) {
		addr, accepts := review89_stallListener(t)
		hc, b := review89_client(&http.Transport{ResponseHeaderTimeout: 100 * time.Millisecond, DisableKeepAlives: true})
		review89_check(t, "ResponseHeaderTimeout", hc, b, "http://"+addr+"/", accepts)
	})
	t.Run("TLSHandshakeTimeout", func(t *testing.T) {
		addr, accepts := review89_stallListener(t)
		hc, b := review89_client(&http.Transport{TLSHandshakeTimeout: 100 * time.Millisecond, DisableKeepAlives: true})
		review89_check(t, "TLSHandshakeTimeout", hc, b, "https://"+addr+"/", accepts)
	})
	t.Run("DialTimeoutBlackhole", func(t *testing.T) {
		// 10.255.255.1 is usually unroutable: a dial that hangs.
		var dials atomic.Int32
		nd := &net.Dialer{Timeout: 100 * time.Millisecond}
		base := &http.Transport{DialContext: func(ctx context.Context, n, a string) (net.Conn, error) {
			dials.Add(1)
			return nd.DialContext(ctx, n, "10.255.255.1:81")
		}}
		if c, err := nd.Dial("tcp", "10.255.255.1:81"); err == nil {
			c.Close()
			t.Skip("10.255.255.1 answers here: no blackhole")
		}
		hc, b := review89_client(base)
		review89_check(t, "dial timeout", hc, b, "http://example.invalid/", &dials)
	})
}

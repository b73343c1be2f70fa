package httpclient_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// A 101 after a retried 503: the upgraded body keeps Write and
// CloseWrite, and a half-close gets the backend's answer.
func TestReview114_UpgradeAfterRetryHalfClose(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.WriteHeader(503)
			return
		}
		conn, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		conn.SetDeadline(time.Now().Add(3 * time.Second))
		got, _ := io.ReadAll(brw)
		conn.Write([]byte("got:" + string(got)))
	}))
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	rt := httpclient.NewTransport(httpclient.Base(base), httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(r114Fast()), pipeline.WithTimeBudget(3*time.Second))))
	req, _ := http.NewRequest("GET", srv.URL, nil)
	req.Header.Set("Upgrade", "echo")
	req.Header.Set("Connection", "Upgrade")
	resp, err := rt.RoundTrip(req)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("err %v resp %v", err, resp)
	}
	defer resp.Body.Close()
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	cw, ok2 := resp.Body.(interface{ CloseWrite() error })
	if !ok || !ok2 {
		t.Fatalf("101 body %T: ReadWriteCloser %v, CloseWrite %v", resp.Body, ok, ok2)
	}
	rwc.Write([]byte("hi"))
	if err := cw.CloseWrite(); err != nil {
		t.Fatalf("CloseWrite: %v", err)
	}
	got, _ := io.ReadAll(rwc)
	if string(got) != "got:hi" {
		t.Fatalf("got %q", got)
	}
}

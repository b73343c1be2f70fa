package httpclient_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/httpclient"
)

// A request that waits for its connection sends the budget left once it
// has one, and the caller's own trace still hears of the connection and
// of the request written.
func TestTheBudgetIsSetAsTheRequestGetsItsConnection(t *testing.T) {
	var hopLeft atomic.Int64
	release := make(chan struct{})
	srv := httptest.NewServer(deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hog" {
			<-release
			return
		}
		if d, ok := r.Context().Deadline(); ok {
			hopLeft.Store(int64(time.Until(d)))
		}
	})))
	defer srv.Close()
	base := &http.Transport{MaxConnsPerHost: 1}
	defer base.CloseIdleConnections()
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.Base(base))}

	hogged := make(chan struct{})
	go func() {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/hog", nil)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { close(hogged) }}))
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-hogged
	const wait = 300 * time.Millisecond
	time.AfterFunc(wait, func() { close(release) })

	var gotConn, wrote atomic.Int32
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	callerDeadline, _ := ctx.Deadline()
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn:      func(httptrace.GotConnInfo) { gotConn.Add(1) },
		WroteHeaders: func() { wrote.Add(1) },
	})
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/x", nil)
	resp, err := hc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	hopDeadline := time.Now().Add(time.Duration(hopLeft.Load()))

	assert.Less(t, hopDeadline.Sub(callerDeadline), wait/3, "the hop's deadline within a few ms of its caller's, not the wait for a connection after it")
	assert.EqualValues(t, 1, gotConn.Load(), "the caller's trace heard of the connection")
	assert.EqualValues(t, 1, wrote.Load(), "and of the request written")
}

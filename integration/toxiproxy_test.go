package integration_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/chaos"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// EnvToxiproxy names the address of a toxiproxy server's API, which
// .ci/run starts.
const envToxiproxy = "RESILIENCEKIT_TOXIPROXY_ADDR"

// TestNetworkFaultsThroughToxiproxy puts toxiproxy between the client and
// the backend and injects real network faults: no call may outlive its
// budget, and no goroutine may leak (TestMain checks).
func TestNetworkFaultsThroughToxiproxy(t *testing.T) {
	addr := os.Getenv(envToxiproxy)
	if addr == "" {
		t.Skipf("%s is not set: no toxiproxy server (.ci/run starts one)", envToxiproxy)
	}
	srv := httptest.NewServer(chaos.New(0, nil))
	t.Cleanup(srv.Close)
	tp := toxiproxy.NewClient(addr)
	t.Cleanup(http.DefaultTransport.(*http.Transport).CloseIdleConnections) // the toxiproxy client's
	proxy, err := tp.CreateProxy(fmt.Sprintf("backend-%d", time.Now().UnixNano()), "127.0.0.1:0", strings.TrimPrefix(srv.URL, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Delete() })

	const budget = time.Second
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	client := httpclient.New(
		httpclient.Base(base),
		httpclient.WithPipeline(pipeline.New(
			pipeline.WithBreaker(breaker.New("backend", breaker.ConsecutiveFailures(1000))),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(0), retrypolicy.BaseDelay(20*time.Millisecond))),
			pipeline.WithTimeBudget(budget),
			pipeline.WithAttemptTimeout(200*time.Millisecond),
		)),
	)
	url := "http://" + proxy.Listen + "/"
	require.NoError(t, client.GetJSON(t.Context(), url, nil), "healthy through the proxy")

	tests := []struct {
		name  string
		toxic string
		attrs toxiproxy.Attributes
	}{
		{"reset_peer", "reset_peer", toxiproxy.Attributes{"timeout": 0}},
		{"latency beyond the attempt timeout", "latency", toxiproxy.Attributes{"latency": 2000}},
		{"timeout: data held forever", "timeout", toxiproxy.Attributes{"timeout": 0}},
		{"down", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.toxic == "" {
				require.NoError(t, proxy.Disable())
				defer func() { require.NoError(t, proxy.Enable()) }()
			} else {
				_, err := proxy.AddToxic(tt.toxic, tt.toxic, "downstream", 1, tt.attrs)
				require.NoError(t, err)
				defer func() { require.NoError(t, proxy.RemoveToxic(tt.toxic)) }()
			}
			base.CloseIdleConnections()
			start := time.Now()
			err := client.GetJSON(t.Context(), url, nil)
			elapsed := time.Since(start)
			require.Error(t, err)
			assert.LessOrEqual(t, elapsed, budget+100*time.Millisecond, "the call kept its budget: %v", err)
			var re *retrypolicy.Error
			require.ErrorAs(t, err, &re, "the retry stage gave up: %v", err)
			assert.Greater(t, re.Attempts, 1, "transient network faults are retried")
		})
	}
	base.CloseIdleConnections()
	require.NoError(t, client.GetJSON(t.Context(), url, nil), "healthy again")
}

package httpclient_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// TestDecodeFailures: a 2xx whose body, read whole, is not JSON or not of
// the type decoded into is the dependency's answer, and a retry meets it
// again: terminal, 502 with the signal, as grpcclient's failed unmarshal.
// A body cut short in its read is no such answer, and keeps the read's
// error.
func TestDecodeFailures(t *testing.T) {
	for _, tc := range []struct {
		name     string
		body     string
		cut      bool // the connection closes before the body's Content-Length
		terminal bool
	}{
		{name: "not JSON", body: "<html>sign in</html>", terminal: true},
		{name: "another type", body: `{"n":"seven"}`, terminal: true},
		{name: "cut short", body: `{"n":`, cut: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !tc.cut {
					_, _ = w.Write([]byte(tc.body))
					return
				}
				conn, buf, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				defer conn.Close()
				_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n" + tc.body)
				_ = buf.Flush()
				_ = conn.(*net.TCPConn).CloseWrite()
			}))
			defer srv.Close()
			var out struct{ N int }
			err := httpclient.New().GetJSON(context.Background(), srv.URL, &out)
			require.Error(t, err)
			class := resilience.Classify(err)
			if tc.terminal {
				assert.Equal(t, resilience.ClassTerminal, class, "%v", err)
				assert.Equal(t, http.StatusBadGateway, retrysignal.Status(err))
				assert.True(t, retrysignal.Retried(err), "answered with the signal")
				return
			}
			assert.NotEqual(t, resilience.ClassTerminal, class, "%v", err)
			assert.True(t, class.Retryable(), "%v: %v", class, err)
		})
	}
}

package dashboard_test

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/dashboard"
	"github.com/resiliencekit/resiliencekit/registry"
)

// r98wrap is a middleware's ResponseWriter of a common kind: it wraps the
// server's with neither Flush nor Unwrap.
type r98wrap struct{ http.ResponseWriter }

// A dashboard mounted behind such a middleware (logging, metrics) cannot
// flush its event stream, which ends after one event (review98): the
// stream tells the browser to reconnect after an interval, not its
// default of seconds, so that the page still changes about every
// interval.
func TestReview98EventsBehindPlainMiddleware(t *testing.T) {
	h := dashboard.New(registry.New(), dashboard.Interval(50*time.Millisecond))
	defer h.Close()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(r98wrap{w}, r)
	}))
	defer ts.Close()
	res, err := http.Get(ts.URL + "/api/events")
	require.NoError(t, err)
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<20)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	require.Len(t, lines, 4, "%q", lines)
	assert.True(t, strings.HasPrefix(lines[0], "data: "), "the state")
	assert.Equal(t, "retry: 50", lines[2], "then the reconnection delay")
}

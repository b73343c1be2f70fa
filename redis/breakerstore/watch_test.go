package breakerstore_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// TestWatchEndsOnASilentLink: the link to Redis goes silent (a partition,
// a proxy that drops the traffic but keeps the connection): a ping not
// answered within one more period ends Watch with an error, so that the
// breaker subscribes again, rather than waiting for ever for changes
// that are lost.
func TestWatchEndsOnASilentLink(t *testing.T) {
	const period = 200 * time.Millisecond
	defer breakerstore.SetWatchPing(period)()
	srv := redistest.Start(t)
	link := redistest.NewProxy(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: link.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	st := breakerstore.New(c, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ended := make(chan error, 1)
	go func() { ended <- st.Watch(ctx, "silent", func(breaker.Fleet) {}) }()
	deadline := time.Now().Add(5 * time.Second)
	for subscribers(t, srv.Client(), "breaker:{silent}:changes") == 0 {
		require.True(t, time.Now().Before(deadline), "subscribed")
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(3 * period) // pings answered: Watch goes on
	select {
	case err := <-ended:
		t.Fatalf("Watch ended on a link that answers: %v", err)
	default:
	}
	link.Cut()
	cutAt := time.Now()
	select {
	case err := <-ended:
		t.Logf("Watch ended %v after the link went silent: %v", time.Since(cutAt).Round(time.Millisecond), err)
		assert.Error(t, err)
	case <-time.After(2*period + time.Second): // a ping's period, one more for its answer, and a loaded machine's lag
		t.Errorf("Watch still subscribed %v after the link went silent", time.Since(cutAt).Round(time.Millisecond))
	}
}

// TestCloseIsBoundedWhileTheSubscriptionReconnects: the subscription's
// connection breaks as the link to Redis goes silent: go-redis reconnects
// inside the receive, for as long as the client's read timeout (1 s
// here), and heeds no cancellation meanwhile. Close is still bounded by
// two flush intervals, and the receiving goroutine ends within the read
// timeout.
func TestCloseIsBoundedWhileTheSubscriptionReconnects(t *testing.T) {
	srv := redistest.Start(t)
	link := redistest.NewProxy(t, srv.Addr())
	const readTimeout = time.Second
	c := redis.NewClient(&redis.Options{Addr: link.Addr(), ContextTimeoutEnabled: true, ReadTimeout: readTimeout})
	defer c.Close()
	admin := srv.Client()
	require.NoError(t, c.Ping(context.Background()).Err())
	require.NoError(t, admin.Ping(context.Background()).Err())
	leaks := goleak.IgnoreCurrent()
	b := breaker.New("reconnect", breaker.Shared(breakerstore.New(c, "")), breaker.FlushInterval(fleetFlush),
		breaker.FailureRate(0.5, 5), breaker.Window(time.Second, 10), breaker.ConsecutiveFailures(0))
	deadline := time.Now().Add(5 * time.Second)
	for subscribers(t, admin, "breaker:{reconnect}:changes") == 0 {
		require.True(t, time.Now().Before(deadline), "subscribed")
		time.Sleep(10 * time.Millisecond)
	}
	link.Cut()
	require.NoError(t, admin.ClientKillByFilter(context.Background(), "TYPE", "pubsub").Err())
	time.Sleep(fleetFlush) // the receive reconnects, over the silent link
	start := time.Now()
	lag := lagOf(func() { _ = b.Close() })
	took := time.Since(start)
	t.Logf("Close took %v (the machine's lag %v)", took.Round(time.Millisecond), lag.Round(time.Millisecond))
	assert.Less(t, took, 2*fleetFlush+closeSlack+lag, "Close's bound: two flush intervals")
	time.Sleep(readTimeout + 300*time.Millisecond)
	assert.NoError(t, goleak.Find(leaks), "goroutines left past the client's read timeout")
}

// subscribers returns how many clients of c's server subscribe to ch.
func subscribers(t *testing.T, c *redis.Client, ch string) int64 {
	t.Helper()
	m, err := c.PubSubNumSub(context.Background(), ch).Result()
	require.NoError(t, err)
	return m[ch]
}

// lagOf runs f, and returns how late a 1 ms timer set beside it fired:
// the machine's scheduling lag meanwhile.
func lagOf(f func()) time.Duration {
	fired := make(chan time.Duration, 1)
	set := time.Now()
	time.AfterFunc(time.Millisecond, func() { fired <- time.Since(set) - time.Millisecond })
	f()
	return <-fired
}

// TestNewWarnsOfAClusterClientsLongReadTimeout: a cluster client learns
// the slot map again with its ReadTimeout, a frozen master among the
// nodes it asks: New warns of one longer than ClusterReadTimeout (the
// default 3 s), and not of one within it.
func TestNewWarnsOfAClusterClientsLongReadTimeout(t *testing.T) {
	var logged bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))
	for _, tt := range []struct {
		readTimeout time.Duration
		warned      bool
	}{{0, true}, {-1, true}, {time.Second, true}, {breakerstore.ClusterReadTimeout, false}, {300 * time.Millisecond, false}} {
		logged.Reset()
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true, ReadTimeout: tt.readTimeout})
		breakerstore.New(c, "")
		_ = c.Close()
		assert.Equal(t, tt.warned, strings.Contains(logged.String(), "ReadTimeout"), "ReadTimeout %v: %s", tt.readTimeout, logged.String())
	}
}

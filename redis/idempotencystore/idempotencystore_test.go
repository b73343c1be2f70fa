package idempotencystore_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/idempotency/storetest"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

func TestMain(m *testing.M) {
	if os.Getenv(envReplica) != "" { // this binary, started by a test as a service replica
		serveReplica()
		return
	}
	goleak.VerifyTestMain(m)
}

func TestContractOnMiniredis(t *testing.T) {
	c, m := redistest.Mini(t)
	storetest.Run(t, func(t *testing.T) idempotency.Store { return idempotencystore.New(c, "") },
		storetest.Sleep(m.FastForward))
}

func TestNewRefusesAClientThatIgnoresDeadlines(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	assert.PanicsWithValue(t, "idempotencystore.New: the go-redis client must have ContextTimeoutEnabled: true, or no call is bounded by its context's deadline",
		func() { idempotencystore.New(c, "") })
}

func TestContractOnRealRedis(t *testing.T) {
	c := redistest.Real(t)
	storetest.Run(t, func(t *testing.T) idempotency.Store { return idempotencystore.New(c, "test:") })
}

func TestClaimsAndRecordsExpire(t *testing.T) {
	c, m := redistest.Mini(t)
	s := idempotencystore.New(c, "")
	ctx := context.Background()
	claim := idempotency.Record{Fingerprint: "fp", Token: "t"}
	found, err := s.Begin(ctx, "k", claim, time.Minute)
	require.NoError(t, err)
	require.Nil(t, found)
	assert.Equal(t, time.Minute, m.TTL("idempotency:k"))

	m.FastForward(time.Minute)
	require.ErrorIs(t, s.Complete(ctx, "k", claim, idempotency.Record{Done: true}, time.Hour), idempotency.ErrNotOwner, "an expired claim is not held")
	found, err = s.Begin(ctx, "k", claim, time.Minute)
	require.NoError(t, err)
	require.Nil(t, found, "an expired claim frees the key")

	require.NoError(t, s.Complete(ctx, "k", claim, idempotency.Record{Fingerprint: "fp", Done: true, Status: 200}, 24*time.Hour))
	assert.Equal(t, 24*time.Hour, m.TTL("idempotency:k"))
}

func TestUnreachableRedisIsAnError(t *testing.T) {
	c, m := redistest.Mini(t)
	m.Close()
	_, err := idempotencystore.New(c, "").Begin(context.Background(), "k", idempotency.Record{}, time.Minute)
	assert.Error(t, err)
}

package dashboard_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/dashboard"
	"github.com/resiliencekit/resiliencekit/registry"
)

// downStore is a shared store that keeps a fleet closed and cannot keep
// a forced mode.
type downStore struct{}

func (downStore) Sync(context.Context, string, breaker.Sync) (breaker.Fleet, error) {
	return breaker.Fleet{}, nil
}

func (downStore) Force(context.Context, string, breaker.Forcing, uint64) error {
	return errors.New("redis: connection refused")
}

func (downStore) Restore(context.Context, string, breaker.Forcing, uint64) error {
	return errors.New("redis: connection refused")
}

func (downStore) Forced(context.Context, string) (breaker.Forcing, uint64, error) {
	return breaker.Forcing{}, 0, nil
}

var _ breaker.SharedForcer = downStore{}

func TestAFleetWideControlTheStoreRefusesSaysSo(t *testing.T) {
	b := breaker.New("fleet", breaker.Shared(downStore{}), breaker.FailureRate(0.5, 10))
	t.Cleanup(func() { _ = b.Close() })
	reg := registry.New()
	require.NoError(t, reg.AddBreaker(b))
	mux := http.NewServeMux()
	mux.Handle("/debug/resilience/", dashboard.New(reg, dashboard.WithAuthorizer(alice)))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	_, tok := page(t, srv)

	code, why := control(t, srv, http.MethodPost, "fleet", "forced-open", sameOrigin(tok))
	assert.Equal(t, http.StatusBadGateway, code)
	assert.Equal(t, "set on this replica only: redis: connection refused", why)
	assert.Equal(t, breaker.ForcedOpen, b.Mode().Mode, "this replica took it")
}

package idempotencystore_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/sql/idempotencystore"
)

// TestCompleteTxKeepsToMaxResponse: a response that the handler records
// in its own transaction is bound by the guard's MaxResponse as one the
// middleware stores: one a byte over is sent whole, and not stored, so
// that its repeat is refused (500, not replayed, the handler not run
// again); one of exactly MaxResponse is replayed.
func TestCompleteTxKeepsToMaxResponse(t *testing.T) {
	d, table := db(t)
	ctx := t.Context()
	store := idempotencystore.New(d, table)
	require.NoError(t, store.CreateTable(ctx))
	const max = 64
	for _, tc := range []struct {
		name   string
		size   int
		replay bool
	}{
		{"at MaxResponse", max, true},
		{"a byte over", max + 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs atomic.Int64
			resp := bytes.Repeat([]byte("r"), tc.size)
			h := idempotency.Middleware(store, idempotency.SharedKeys(), idempotency.MaxResponse(max))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				claim := idempotency.FromContext(r.Context())
				ctx, cancel := claim.WithLeaseDeadline(r.Context())
				defer cancel()
				tx, err := d.BeginTx(ctx, nil)
				require.NoError(t, err)
				defer tx.Rollback()
				require.NoError(t, store.CompleteTx(ctx, tx, claim, http.StatusCreated, nil, resp))
				require.NoError(t, tx.Commit())
				w.WriteHeader(http.StatusCreated)
				_, _ = w.Write(resp)
			}))
			post := func() *httptest.ResponseRecorder {
				r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/", nil)
				r.Header.Set(idempotency.Header, "key-"+strconv.Itoa(tc.size))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w
			}
			w := post()
			require.Equal(t, http.StatusCreated, w.Code)
			assert.Equal(t, resp, w.Body.Bytes(), "sent whole")
			w = post()
			if tc.replay {
				assert.Equal(t, http.StatusCreated, w.Code)
				assert.Equal(t, resp, w.Body.Bytes())
				assert.Equal(t, "true", w.Header().Get(idempotency.ReplayedHeader))
			} else {
				assert.Equal(t, http.StatusInternalServerError, w.Code, "not replayable: %s", w.Body)
			}
			assert.EqualValues(t, 1, runs.Load(), "the handler ran once")
		})
	}
}

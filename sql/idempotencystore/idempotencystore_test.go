package idempotencystore_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/idempotency/storetest"
	"github.com/resiliencekit/resiliencekit/sql/idempotencystore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// EnvDSN names a real PostgreSQL server for tests; .ci/run starts one.
const EnvDSN = "RESILIENCEKIT_POSTGRES_DSN"

// db returns a connection to the test server and a table of the test's
// own, or skips the test if EnvDSN is unset.
func db(t *testing.T) (*sql.DB, string) {
	dsn := os.Getenv(EnvDSN)
	if dsn == "" {
		t.Skipf("%s is not set: no PostgreSQL server (.ci/run starts one)", EnvDSN)
	}
	db, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	db.SetMaxOpenConns(20) // under the server's connection limit, as in production
	require.NoError(t, db.PingContext(t.Context()))
	table := fmt.Sprintf("idem_%d", time.Now().UnixNano())
	t.Cleanup(func() { _, _ = db.Exec(`DROP TABLE IF EXISTS ` + table) })
	return db, table
}

func TestContract(t *testing.T) {
	d, table := db(t)
	s := idempotencystore.New(d, table)
	require.NoError(t, s.CreateTable(t.Context()))
	storetest.Run(t, func(*testing.T) idempotency.Store { return s })
	n, err := s.DeleteExpired(t.Context())
	require.NoError(t, err)
	t.Logf("deleted %d expired rows", n)
}

func TestNewRefusesATableThatIsNotAnIdentifier(t *testing.T) {
	assert.Panics(t, func() { idempotencystore.New(nil, "orders; DROP TABLE x") })
}

// TestEffectAndRecordCommitTogether: the handler writes its order and the
// record of its response in one transaction. A failed commit (a deferred
// constraint, as a crash before the commit would) leaves neither, and the
// retry runs once; a commit leaves both, and the next retry is replayed.
func TestEffectAndRecordCommitTogether(t *testing.T) {
	d, table := db(t)
	ctx := t.Context()
	store := idempotencystore.New(d, table)
	require.NoError(t, store.CreateTable(ctx))
	customers, orders := table+"_customers", table+"_orders"
	_, err := d.ExecContext(ctx, `CREATE TABLE `+customers+` (id int PRIMARY KEY)`)
	require.NoError(t, err)
	_, err = d.ExecContext(ctx, `CREATE TABLE `+orders+` (id serial PRIMARY KEY, customer int REFERENCES `+customers+` DEFERRABLE INITIALLY DEFERRED)`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = d.Exec(`DROP TABLE IF EXISTS ` + orders + `, ` + customers) })

	var runs atomic.Int64
	h := idempotency.Middleware(store, idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		claim := idempotency.FromContext(r.Context())
		body, _ := io.ReadAll(r.Body)
		ctx, cancel := claim.WithLeaseDeadline(r.Context()) // the transaction, commit included, within the lease
		defer cancel()
		tx, err := d.BeginTx(ctx, nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		defer tx.Rollback()
		var id int
		if err := tx.QueryRowContext(ctx, `INSERT INTO `+orders+` (customer) VALUES ($1) RETURNING id`, string(body)).Scan(&id); err != nil {
			claim.Abandon()
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		resp := []byte(fmt.Sprintf(`{"order":%d}`, id))
		if err := store.CompleteTx(ctx, tx, claim, http.StatusCreated, nil, resp); err != nil {
			claim.Abandon() // the lease ran out: roll back, free nothing of another's
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if err := tx.Commit(); err != nil { // here the test's deferred constraint fails
			claim.Abandon() // nothing committed: free the key
			http.Error(w, "commit: "+err.Error(), http.StatusInternalServerError)
			return
		}
		// the record committed with the effect: the middleware stores nothing more
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(resp)
	}))
	post := func(customer string) *httptest.ResponseRecorder {
		r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/orders", strings.NewReader(customer))
		r.Header.Set(idempotency.Header, "order-key")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	count := func() (n int) {
		require.NoError(t, d.QueryRowContext(ctx, `SELECT count(*) FROM `+orders).Scan(&n))
		return n
	}

	w := post("7") // no customer 7: the commit fails
	assert.Equal(t, http.StatusInternalServerError, w.Code)
	assert.Contains(t, w.Body.String(), "commit")
	assert.Zero(t, count(), "no order")

	_, err = d.ExecContext(ctx, `INSERT INTO `+customers+` VALUES (7)`)
	require.NoError(t, err)
	w = post("7") // the retry runs: the key was left free
	assert.Equal(t, http.StatusCreated, w.Code)
	assert.Empty(t, w.Header().Get(idempotency.ReplayedHeader))
	first := w.Body.String()
	assert.Equal(t, 1, count())

	w = post("7")
	assert.Equal(t, http.StatusCreated, w.Code)
	assert.Equal(t, "true", w.Header().Get(idempotency.ReplayedHeader))
	assert.Equal(t, first, w.Body.String())
	assert.Equal(t, 1, count(), "one order")
	assert.EqualValues(t, 2, runs.Load(), "the failed commit and the one that committed")
}

// TestStoreHonoursItsContext: a call whose context has run out returns at
// once, as the middleware's time bound needs.
func TestStoreHonoursItsContext(t *testing.T) {
	d, table := db(t)
	s := idempotencystore.New(d, table)
	require.NoError(t, s.CreateTable(t.Context()))
	ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
	defer cancel()
	time.Sleep(2 * time.Millisecond)
	_, err := s.Begin(ctx, "k", idempotency.Record{Token: "t"}, time.Minute)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

// TestAnyScopeMakesAKeyTheDatabaseTakes: a scope of bytes that are not
// UTF-8 (PostgreSQL's text refuses them) still works.
func TestAnyScopeMakesAKeyTheDatabaseTakes(t *testing.T) {
	d, table := db(t)
	s := idempotencystore.New(d, table)
	require.NoError(t, s.CreateTable(t.Context()))
	h := idempotency.Middleware(s, idempotency.Scope(func(*http.Request) string { return "\xff\x00acct" }))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/orders", strings.NewReader("{}"))
	r.Header.Set(idempotency.Header, "k")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	assert.Equal(t, http.StatusCreated, w.Code)
}

package idempotencystore_test

// Review 48: the store's faults fail open (docs/idempotency.md, "When the
// store stays down: fail open"), for the exactly-once handler too?

import (
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/sql/idempotencystore"
)

// r48Drive posts a new key every 50 ms for d and returns the codes in order.
func r48Drive(url string, d time.Duration) (codes []int, bodies []string, took []time.Duration) {
	client := &http.Client{Timeout: 30 * time.Second}
	end := time.Now().Add(d)
	for i := 0; time.Now().Before(end); i++ {
		code, _, body, dt := r48Post(client, url, "k"+time.Now().Format("150405.000000"))
		codes, bodies, took = append(codes, code), append(bodies, body), append(took, dt)
		time.Sleep(50 * time.Millisecond)
	}
	return
}

// r48DriveConcurrently posts a new key every 100 ms for d, each on its own
// goroutine, and returns the codes in the order sent.
func r48DriveConcurrently(url string, d time.Duration) (codes []int, bodies []string, took []time.Duration) {
	client := &http.Client{Timeout: 20 * time.Second}
	n := int(d / (100 * time.Millisecond))
	codes, bodies, took = make([]int, n), make([]string, n), make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			codes[i], _, bodies[i], took[i] = r48Post(client, url, fmt.Sprintf("c%d-%d", time.Now().UnixNano(), i))
		})
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	return
}

func r48Tally(codes []int) map[int]int {
	m := map[int]int{}
	for _, c := range codes {
		m[c]++
	}
	return m
}

// TestReview48FailOpenWithCompleteTx: the store (a *sql.DB of its own, as
// the package doc advises) fails; the handler's own database is healthy,
// so a plain server answers every request 201. After FailOpenAfter (1 s)
// the guard runs keyed requests on its local records: do they complete?
func TestReview48FailOpenWithCompleteTx(t *testing.T) {
	pg := startPostgres(t)
	handlerDB, err := sql.Open("pgx", pg.dsn())
	require.NoError(t, err)
	t.Cleanup(func() { _ = handlerDB.Close() })
	r48Orders(t, handlerDB)
	require.NoError(t, idempotencystore.New(handlerDB, "idem").CreateTable(t.Context()))

	opts := func(ev *r48Events) []idempotency.Option {
		return r48Opts(ev, idempotency.StoreTimeout(100*time.Millisecond), idempotency.Lease(time.Second),
			idempotency.FailOpenAfter(time.Second))
	}

	t.Run("the store's pool cannot connect", func(t *testing.T) {
		storeDB, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable")
		require.NoError(t, err)
		t.Cleanup(func() { _ = storeDB.Close() })
		store := idempotencystore.New(storeDB, "idem")
		var runs, commits atomic.Int64
		ev := &r48Events{}
		srv := httptest.NewServer(idempotency.Middleware(store, opts(ev)...)(r48Handler(handlerDB, store, &runs, &commits, r48Steps{})))
		t.Cleanup(srv.Close)
		codes, bodies, _ := r48Drive(srv.URL, 4*time.Second)
		t.Logf("codes %v; tally %v; runs %d commits %d; events %v", codes, r48Tally(codes), runs.Load(), commits.Load(), ev)
		var late []int
		for i, c := range codes {
			if i >= len(codes)/2 {
				late = append(late, c)
				if c != http.StatusCreated {
					t.Logf("late answer %d: %s", c, bodies[i])
				}
			}
		}
		assert.Equal(t, 1, ev.count(resilience.EventSharedStateUnavailable), "failed open")
		for _, c := range late {
			assert.Equal(t, http.StatusCreated, c, "after FailOpenAfter a keyed request completes, as without the middleware")
		}
	})

	t.Run("the idempotency table locked by another session", func(t *testing.T) {
		storeDB, err := sql.Open("pgx", pg.dsn())
		require.NoError(t, err)
		t.Cleanup(func() { _ = storeDB.Close() })
		store := idempotencystore.New(storeDB, "idem")
		var runs, commits atomic.Int64
		ev := &r48Events{}
		srv := httptest.NewServer(idempotency.Middleware(store, opts(ev)...)(r48Handler(handlerDB, store, &runs, &commits, r48Steps{})))
		t.Cleanup(srv.Close)

		admin, err := sql.Open("pgx", pg.dsn())
		require.NoError(t, err)
		t.Cleanup(func() { _ = admin.Close() })
		lockTx, err := admin.Begin()
		require.NoError(t, err)
		_, err = lockTx.Exec(`LOCK TABLE idem IN ACCESS EXCLUSIVE MODE`) // a migration, VACUUM FULL...
		require.NoError(t, err)
		before := r48Count(t, admin, `SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'`)
		var maxBackends atomic.Int64
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(200 * time.Millisecond):
				}
				var n int64
				if admin.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'`).Scan(&n) == nil && n > maxBackends.Load() {
					maxBackends.Store(n)
				}
			}
		}()
		lockHeld := 6 * time.Second
		time.AfterFunc(lockHeld, func() { _ = lockTx.Rollback() })
		codes, bodies, took := r48DriveConcurrently(srv.URL, 5*time.Second)
		close(stop)
		time.Sleep(500 * time.Millisecond)
		after := r48Count(t, admin, `SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'`)
		t.Logf("codes %v; tally %v; runs %d commits %d; events %v", codes, r48Tally(codes), runs.Load(), commits.Load(), ev)
		for i := range codes {
			t.Logf("request %2d: %d after %v %.60s", i, codes[i], took[i].Round(time.Millisecond), bodies[i])
		}
		t.Logf("client backends: %d before, at most %d during, %d after the lock", before, maxBackends.Load(), after)
		for i, c := range codes {
			assert.Less(t, took[i], 2*time.Second, "request %d (%d): bounded by the store timeout, or the lease", i, c)
		}
		late := codes[len(codes)/2:]
		assert.Equal(t, 1, ev.count(resilience.EventSharedStateUnavailable), "failed open")
		for _, c := range late {
			assert.Equal(t, http.StatusCreated, c, "after FailOpenAfter a keyed request completes, as without the middleware")
		}
	})
}

// TestReview48IdempotencyTablespaceFull: the idempotency table's
// tablespace is full (its own small disk); the orders table has room, so a
// plain server answers 201. After FailOpenAfter (1 s), do keyed requests
// complete?
func TestReview48IdempotencyTablespaceFull(t *testing.T) {
	pg := startPostgres(t)
	dir, err := os.MkdirTemp("", "r48tiny")
	require.NoError(t, err)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=4m,uid=%d,gid=%d", pg.cred.Uid, pg.cred.Gid), "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("no tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run(); _ = os.Remove(dir) })
	db, err := sql.Open("pgx", pg.dsn())
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	r48Orders(t, db)
	_, err = db.Exec(`CREATE TABLESPACE tiny LOCATION '` + dir + `'`)
	require.NoError(t, err)
	store := idempotencystore.New(db, "idem")
	require.NoError(t, store.CreateTable(t.Context()))
	_, err = db.Exec(`ALTER TABLE idem SET TABLESPACE tiny`)
	require.NoError(t, err)
	_, err = db.Exec(`ALTER INDEX idem_pkey SET TABLESPACE tiny`)
	require.NoError(t, err)
	_, err = db.Exec(`CREATE TABLE filler (b text) TABLESPACE tiny`)
	require.NoError(t, err)
	for {
		if _, err = db.Exec(`INSERT INTO filler SELECT repeat(md5(g::text), 60) FROM generate_series(1, 200) g`); err != nil {
			break
		}
	}
	t.Logf("filled: %v", err)
	var runs, commits atomic.Int64
	ev := &r48Events{}
	srv := httptest.NewServer(idempotency.Middleware(store, r48Opts(ev, idempotency.StoreTimeout(100*time.Millisecond),
		idempotency.Lease(time.Second), idempotency.FailOpenAfter(time.Second))...)(r48Handler(db, store, &runs, &commits, r48Steps{})))
	t.Cleanup(srv.Close)
	codes, bodies, _ := r48Drive(srv.URL, 3*time.Second)
	t.Logf("codes %v; runs %d commits %d; events %v", r48Tally(codes), runs.Load(), commits.Load(), ev)
	t.Logf("last answer: %d %s", codes[len(codes)-1], bodies[len(bodies)-1])
	assert.Equal(t, http.StatusCreated, codes[len(codes)-1], "after FailOpenAfter a keyed request completes, as without the middleware")
}

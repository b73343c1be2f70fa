package idempotencystore_test

import (
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/idempotency/storetest"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/sql/idempotencystore"
)

// pgServer is a PostgreSQL server of the test's own, run as the postgres
// user in a temporary directory (as .ci/run runs its own), to kill,
// freeze and restart.
type pgServer struct {
	t    *testing.T
	bin  string
	dir  string
	port string
	cred *syscall.Credential
	cmd  *exec.Cmd
}

// startPostgres starts a server, or skips the test if the binaries under
// /usr/lib/postgresql/*/bin, the postgres user or root are missing.
func startPostgres(t *testing.T) *pgServer {
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(bins) == 0 {
		t.Skip("no PostgreSQL binaries under /usr/lib/postgresql/*/bin (.ci/run installs them)")
	}
	sort.Strings(bins)
	u, err := user.Lookup("postgres")
	if err != nil || os.Geteuid() != 0 {
		t.Skip("a PostgreSQL server of the test's own runs as the postgres user: needs root and that user")
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir, err := os.MkdirTemp("", "pgtest")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	require.NoError(t, os.Chown(dir, uid, gid))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	s := &pgServer{t: t, bin: filepath.Dir(bins[len(bins)-1]), dir: dir, port: port,
		cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	initdb := exec.Command(filepath.Join(s.bin, "initdb"), "-D", filepath.Join(dir, "data"), "-A", "trust", "-U", "postgres")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	out, err := initdb.CombinedOutput()
	require.NoError(t, err, "%s", out)
	s.start()
	t.Cleanup(func() {
		if s.cmd != nil {
			s.signalAll(syscall.SIGCONT)
			s.signalAll(syscall.SIGKILL)
			_ = s.cmd.Wait()
		}
	})
	return s
}

func (s *pgServer) start() {
	s.cmd = exec.Command(filepath.Join(s.bin, "postgres"), "-D", filepath.Join(s.dir, "data"), "-p", s.port,
		"-k", s.dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
		"-c", "max_connections=400") // the contract's 200 concurrent requests each hold a connection of an unbounded pool
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	require.NoError(s.t, s.cmd.Start())
	for range 300 {
		if db, err := sql.Open("pgx", s.dsn()); err == nil {
			err = db.Ping()
			db.Close()
			if err == nil {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatal("PostgreSQL did not start")
}

func (s *pgServer) dsn() string {
	return "postgres://postgres@127.0.0.1:" + s.port + "/postgres?sslmode=disable"
}

// signalAll signals the postmaster and its backends.
func (s *pgServer) signalAll(sig syscall.Signal) {
	pid := s.cmd.Process.Pid
	// The postmaster stopped first, its children are found while they are
	// still its own: signalled first, a postmaster that dies leaves them to
	// init before they are found, and a backend that lives on serves its
	// connection (a claim made after Kill, CI134).
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	var children []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			n, _ := strconv.Atoi(e.Name())
			children = append(children, n)
		}
	}
	for _, n := range children {
		_ = syscall.Kill(n, sig)
	}
	_ = syscall.Kill(pid, sig)
	if sig != syscall.SIGSTOP && sig != syscall.SIGKILL {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
}

// Kill kills the server and its backends with SIGKILL, as a crash would.
func (s *pgServer) Kill() {
	s.signalAll(syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Restart starts the server again after Kill; it recovers from its WAL.
func (s *pgServer) Restart() { s.start() }

// Freeze stops the server and its backends with SIGSTOP; Thaw resumes them.
func (s *pgServer) Freeze() { s.signalAll(syscall.SIGSTOP) }
func (s *pgServer) Thaw()   { s.signalAll(syscall.SIGCONT) }

// open returns a pool on the server and a store in a table of its own.
func (s *pgServer) open() (*sql.DB, *idempotencystore.Store) {
	db, err := sql.Open("pgx", s.dsn())
	require.NoError(s.t, err)
	s.t.Cleanup(func() { _ = db.Close() })
	store := idempotencystore.New(db, "idem")
	require.NoError(s.t, store.CreateTable(s.t.Context()))
	return db, store
}

// pgReplica is a service on the store whose handler takes d and saves its
// result through the middleware.
func pgReplica(t *testing.T, store *idempotencystore.Store, runs *atomic.Int64, d time.Duration, opts ...idempotency.Option) *httptest.Server {
	opts = append(opts, idempotency.SharedKeys(), idempotency.WithLogger(slog.New(slog.DiscardHandler)))
	srv := httptest.NewServer(idempotency.Middleware(store, opts...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		time.Sleep(d)
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"order":%d}`, n)
	})))
	t.Cleanup(srv.Close)
	return srv
}

func postKey(t *testing.T, url, key string) (int, string, string) {
	req, _ := http.NewRequest(http.MethodPost, url+"/orders", strings.NewReader(`{"sku":"a"}`))
	req.Header.Set(idempotency.Header, key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, "", ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get(idempotency.ReplayedHeader), string(body)
}

// TestPostgresDownAsTheHandlerStarts: the server is killed (SIGKILL) as
// the handler starts and is back 3 s later, lease 8 s: the claim survives
// in the database, the renewals ride the outage out, the result is stored
// and the request runs once.
func TestPostgresDownAsTheHandlerStarts(t *testing.T) {
	pg := startPostgres(t)
	_, store := pg.open()
	var runs atomic.Int64
	a := pgReplica(t, store, &runs, 4*time.Second, idempotency.Lease(8*time.Second))
	b := pgReplica(t, store, &runs, 4*time.Second, idempotency.Lease(8*time.Second))
	first := make(chan int)
	start := time.Now()
	go func() { code, _, _ := postKey(t, a.URL, "k"); first <- code }()
	time.Sleep(200 * time.Millisecond)
	pg.Kill()
	var repeats []int
	for time.Since(start) < 3*time.Second {
		code, _, _ := postKey(t, b.URL, "k")
		repeats = append(repeats, code)
		time.Sleep(500 * time.Millisecond)
	}
	pg.Restart()
	assert.Equal(t, http.StatusCreated, <-first)
	t.Logf("answered after %v; repeats on another replica while down %v", time.Since(start).Round(time.Millisecond), repeats)
	for _, code := range repeats {
		assert.Contains(t, []int{http.StatusConflict, http.StatusServiceUnavailable}, code)
	}
	code, replay, body := postKey(t, b.URL, "k")
	assert.Equal(t, http.StatusCreated, code)
	assert.Equal(t, "true", replay)
	assert.JSONEq(t, `{"order":1}`, body)
	assert.EqualValues(t, 1, runs.Load(), "one run")
}

// TestPostgresFrozenAsTheHandlerEnds: the server and its backends are
// stopped (SIGSTOP) for 5 s just as the handler ends, lease 8 s: the
// answer goes out after the first try to save fails, the save is retried
// while the lease lasts and gets through; one run.
func TestPostgresFrozenAsTheHandlerEnds(t *testing.T) {
	pg := startPostgres(t)
	_, store := pg.open()
	var runs, notStored atomic.Int64
	rec := resilience.ListenerFunc(func(e resilience.Event) {
		if e.Kind == resilience.EventNotStored {
			notStored.Add(1)
		}
	})
	opts := []idempotency.Option{idempotency.Lease(8 * time.Second), idempotency.WithListener(rec)}
	a := pgReplica(t, store, &runs, 3*time.Second, opts...)
	b := pgReplica(t, store, &runs, 3*time.Second, opts...)
	first := make(chan int, 1)
	var answered atomic.Int64 // when a's client got its answer, since start
	start := time.Now()
	go func() {
		code, _, _ := postKey(t, a.URL, "k")
		answered.Store(int64(time.Since(start)))
		first <- code
	}()
	time.Sleep(2900 * time.Millisecond)
	pg.Freeze()
	var repeats []int
	for time.Since(start) < 7500*time.Millisecond {
		code, _, _ := postKey(t, b.URL, "k")
		repeats = append(repeats, code)
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(time.Until(start.Add(7900 * time.Millisecond)))
	pg.Thaw()
	assert.Equal(t, http.StatusCreated, <-first)
	// The first try to save fails after one StoreTimeout (500 ms), and
	// the answer goes out then, whole, while the save is tried again.
	at := time.Duration(answered.Load())
	t.Logf("answered %v after it started (frozen from 2.9 s to 7.9 s); repeats meanwhile %v", at.Round(time.Millisecond), repeats)
	assert.Less(t, at, 6*time.Second, "the answer did not wait for the store")
	thawed := time.Now()
	// Until the retried save lands, the key is in progress (409); a's
	// pool and b's make new connections, those they had timed out.
	require.Eventually(t, func() bool {
		c, _, _ := postKey(t, b.URL, "k")
		return c != http.StatusServiceUnavailable && c != http.StatusConflict
	}, 10*time.Second, 100*time.Millisecond, "the save gets through once the server is back")
	t.Logf("the other replica replayed %v after the thaw", time.Since(thawed).Round(time.Millisecond))
	code, replay, body := postKey(t, b.URL, "k")
	assert.Equal(t, http.StatusCreated, code)
	assert.Equal(t, "true", replay)
	assert.JSONEq(t, `{"order":1}`, body)
	assert.EqualValues(t, 1, runs.Load(), "one run")
	assert.Zero(t, notStored.Load(), "the result was stored")
}

// TestCompleteTxIsBoundedByTheLease: a handler that completes its claim in
// its own transaction, begun under claim.WithLeaseDeadline, with the
// server frozen before its commit: the request ends within the lease, not
// after the freeze. Before that, repeats during the transaction get 409
// with Retry-After and no store failure is reported.
func TestCompleteTxIsBoundedByTheLease(t *testing.T) {
	pg := startPostgres(t)
	db, store := pg.open()
	_, err := db.ExecContext(t.Context(), `CREATE TABLE orders (id serial PRIMARY KEY)`)
	require.NoError(t, err)
	var failed atomic.Int64
	rec := resilience.ListenerFunc(func(e resilience.Event) {
		if e.Kind == resilience.EventStoreFailed {
			failed.Add(1)
		}
	})
	inTx := make(chan struct{}, 1)
	var commitTook atomic.Int64
	proceed := make(chan struct{})
	const lease = 3 * time.Second
	h := idempotency.Middleware(store, idempotency.SharedKeys(), idempotency.Lease(lease), idempotency.WithListener(rec),
		idempotency.WithLogger(slog.New(slog.DiscardHandler)))(orderHandler(db, store, waitToCommit(inTx, proceed, &commitTook)))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	// Repeats while the transaction holds the record's row: 409, promptly.
	go func() { <-inTx }()
	done := make(chan int)
	go func() { code, _, _ := postKey(t, srv.URL, "k1"); done <- code }()
	time.Sleep(300 * time.Millisecond)
	for range 3 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(`{"sku":"a"}`))
		req.Header.Set(idempotency.Header, "k1")
		began := time.Now()
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusConflict, resp.StatusCode)
		assert.Equal(t, "1", resp.Header.Get("Retry-After"))
		assert.Less(t, time.Since(began), 300*time.Millisecond)
	}
	proceed <- struct{}{}
	assert.Equal(t, http.StatusCreated, <-done)
	assert.Zero(t, failed.Load(), "no store failure reported for a repeat during the commit")

	// The server frozen before the commit: the request ends within the lease.
	go func() { <-inTx; pg.Freeze(); proceed <- struct{}{} }()
	began := time.Now()
	code, _, _ := postKey(t, srv.URL, "k2")
	took := time.Since(began)
	pg.Thaw()
	t.Logf("frozen before the commit: the commit gave up after %v, the request answered %d after %v (lease %v; then the key's release is tried for up to 4 store timeouts)",
		time.Duration(commitTook.Load()).Round(time.Millisecond), code, took.Round(time.Millisecond), lease)
	assert.Less(t, took, lease+4*500*time.Millisecond+500*time.Millisecond, "bounded by the lease")
	assert.Equal(t, http.StatusServiceUnavailable, code)
}

// TestContractOnAServerOfItsOwn runs the store contract on a server of
// the test's own when no shared server is named (TestContract runs it on
// that one).
func TestContractOnAServerOfItsOwn(t *testing.T) {
	if os.Getenv(EnvDSN) != "" {
		t.Skip("TestContract runs the contract on the shared server")
	}
	_, store := startPostgres(t).open()
	storetest.Run(t, func(*testing.T) idempotency.Store { return store })
}

// TestASlowHandlersTransactionKeepsItsLease: the documented pattern,
// claim.WithLeaseDeadline(r.Context()) before BeginTx, in a handler that
// works 2 s under a 1.5 s lease: the lease is renewed meanwhile and the
// transaction's deadline follows it, so CompleteTx and the commit succeed;
// the retry is replayed, one order.
func TestASlowHandlersTransactionKeepsItsLease(t *testing.T) {
	pg := startPostgres(t)
	db, store := pg.open()
	_, err := db.ExecContext(t.Context(), `CREATE TABLE slow_orders (id serial PRIMARY KEY)`)
	require.NoError(t, err)
	h := idempotency.Middleware(store, idempotency.SharedKeys(), idempotency.Lease(1500*time.Millisecond), idempotency.StoreTimeout(100*time.Millisecond),
		idempotency.WithLogger(slog.New(slog.DiscardHandler)))(orderHandler(db, store, orderSteps{
		table: "slow_orders",
		work:  func() { time.Sleep(2 * time.Second) }, // slow work, longer than the lease
	}))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	code, _, body := postKey(t, srv.URL, "slow")
	assert.Equal(t, http.StatusCreated, code, body)
	code, replay, _ := postKey(t, srv.URL, "slow")
	assert.Equal(t, http.StatusCreated, code)
	assert.Equal(t, "true", replay)
	var n int
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT count(*) FROM slow_orders`).Scan(&n))
	assert.Equal(t, 1, n, "one order")
}

// TestARepeatOnAnotherReplicaDuringTheCommitGets409: while the handler's
// transaction has completed the record but not committed, a repeat that
// reaches another replica (which holds no claim in memory) reads the
// claim without waiting for the row's lock: 409 with Retry-After at once,
// no store failure; after the commit, the answer is replayed.
func TestARepeatOnAnotherReplicaDuringTheCommitGets409(t *testing.T) {
	pg := startPostgres(t)
	db, store := pg.open()
	_, err := db.ExecContext(t.Context(), `CREATE TABLE orders (id serial PRIMARY KEY)`)
	require.NoError(t, err)
	var failed atomic.Int64
	rec := resilience.ListenerFunc(func(e resilience.Event) {
		if e.Kind == resilience.EventStoreFailed {
			failed.Add(1)
		}
	})
	inTx, proceed := make(chan struct{}, 1), make(chan struct{})
	var commitTook atomic.Int64
	replica := func() http.Handler {
		return idempotency.Middleware(store, idempotency.SharedKeys(), idempotency.WithListener(rec),
			idempotency.WithLogger(slog.New(slog.DiscardHandler)))(orderHandler(db, store, waitToCommit(inTx, proceed, &commitTook)))
	}
	a, b := httptest.NewServer(replica()), httptest.NewServer(replica())
	t.Cleanup(a.Close)
	t.Cleanup(b.Close)

	first := make(chan int)
	go func() { code, _, _ := postKey(t, a.URL, "k-commit"); first <- code }()
	<-inTx
	start := time.Now()
	req, _ := http.NewRequest(http.MethodPost, b.URL+"/orders", strings.NewReader(`{"sku":"a"}`))
	req.Header.Set(idempotency.Header, "k-commit")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	took := time.Since(start)
	assert.Equal(t, http.StatusConflict, resp.StatusCode, "the claim, read without waiting for the commit")
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))
	assert.Less(t, took, time.Second)
	assert.Zero(t, failed.Load(), "no store failure")
	close(proceed)
	assert.Equal(t, http.StatusCreated, <-first)
	code, replayed, body := postKey(t, b.URL, "k-commit")
	assert.Equal(t, http.StatusCreated, code)
	assert.Equal(t, "true", replayed)
	assert.Equal(t, `{"order":1}`, body)
}

// orderSteps are what an order handler does beside its own work, each
// optional: work after the order's insert, before CompleteTx; beforeCommit
// once the record is completed but not committed; committed with the
// commit's error, before the handler answers.
type orderSteps struct {
	table        string // default "orders"
	work         func()
	beforeCommit func()
	committed    func(error)
}

// orderHandler is a handler that creates an order and completes its key in
// the same transaction (CompleteTx), under the lease's deadline, with
// steps between. A failure before the commit abandons the key.
func orderHandler(db *sql.DB, store *idempotencystore.Store, steps orderSteps) http.HandlerFunc {
	table := steps.table
	if table == "" {
		table = "orders"
	}
	call := func(fn func()) {
		if fn != nil {
			fn()
		}
	}
	return func(w http.ResponseWriter, r *http.Request) {
		claim := idempotency.FromContext(r.Context())
		ctx, cancel := claim.WithLeaseDeadline(r.Context())
		defer cancel()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		defer tx.Rollback()
		var id int
		if err := tx.QueryRowContext(ctx, `INSERT INTO `+table+` DEFAULT VALUES RETURNING id`).Scan(&id); err != nil {
			claim.Abandon()
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		call(steps.work)
		resp := []byte(fmt.Sprintf(`{"order":%d}`, id))
		if err := store.CompleteTx(ctx, tx, claim, http.StatusCreated, nil, resp); err != nil {
			claim.Abandon()
			http.Error(w, "complete: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		call(steps.beforeCommit)
		err = tx.Commit()
		if steps.committed != nil {
			steps.committed(err)
		}
		if err != nil {
			claim.Abandon()
			http.Error(w, "commit: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(resp)
	}
}

// waitToCommit returns the steps of a handler that says on inTx when its
// record is completed but not committed, commits once proceed says so,
// and records on commitTook how long the commit took.
func waitToCommit(inTx chan<- struct{}, proceed <-chan struct{}, commitTook *atomic.Int64) orderSteps {
	var began time.Time
	return orderSteps{
		beforeCommit: func() {
			inTx <- struct{}{}
			<-proceed
			began = time.Now()
		},
		committed: func(error) { commitTook.Store(int64(time.Since(began))) },
	}
}

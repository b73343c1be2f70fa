package idempotencystore_test

import (
	"database/sql"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/sql/idempotencystore"
)

// tcpSwitch is a TCP proxy on 127.0.0.1 whose target the test can change,
// as one address in front of a primary that fails over (a virtual IP, a
// managed service's endpoint). Retarget closes every connection; new ones
// go to the new target, or are refused (closed at once) if it is "".
type tcpSwitch struct {
	l net.Listener

	mu     sync.Mutex
	target string
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newSwitch(t *testing.T, target string) *tcpSwitch {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &tcpSwitch{l: l, target: target, conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(func() {
		_ = l.Close()
		s.Retarget("")
		s.wg.Wait()
	})
	return s
}

func (s *tcpSwitch) Port() string {
	_, port, _ := net.SplitHostPort(s.l.Addr().String())
	return port
}

func (s *tcpSwitch) Retarget(target string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.target = target
	for c := range s.conns {
		_ = c.Close()
	}
}

func (s *tcpSwitch) accept() {
	defer s.wg.Done()
	for {
		c, err := s.l.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		target := s.target
		s.mu.Unlock()
		if target == "" {
			_ = c.Close()
			continue
		}
		up, err := net.DialTimeout("tcp", target, time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		s.mu.Lock()
		if s.target != target { // retargeted while dialling
			s.mu.Unlock()
			_ = c.Close()
			_ = up.Close()
			continue
		}
		s.conns[c], s.conns[up] = struct{}{}, struct{}{}
		s.mu.Unlock()
		s.wg.Add(2)
		pipe := func(dst, src net.Conn) {
			defer s.wg.Done()
			_, _ = io.Copy(dst, src)
			_ = dst.Close()
			_ = src.Close()
			s.mu.Lock()
			delete(s.conns, dst)
			delete(s.conns, src)
			s.mu.Unlock()
		}
		go pipe(c, up)
		go pipe(up, c)
	}
}

// configurePrimary sets up s for streaming replication (wal_level=replica,
// max_wal_senders, replication from 127.0.0.1 trusted) and restarts it.
func (s *pgServer) configurePrimary() {
	data := filepath.Join(s.dir, "data")
	appendFile(s.t, filepath.Join(data, "postgresql.conf"), "\nwal_level = replica\nmax_wal_senders = 10\nwal_keep_size = 64MB\n")
	appendFile(s.t, filepath.Join(data, "pg_hba.conf"), "\nhost replication all 127.0.0.1/32 trust\n")
	_ = syscall.Kill(s.cmd.Process.Pid, syscall.SIGINT) // fast shutdown
	_ = s.cmd.Wait()
	s.start()
}

func appendFile(t *testing.T, name, text string) {
	f, err := os.OpenFile(name, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(text)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// startStandby makes a streaming standby of the primary at
// 127.0.0.1:primaryPort (pg_basebackup -R: standby.signal and
// primary_conninfo) and starts it on a free port of its own.
func (s *pgServer) startStandby(primaryPort string) *pgServer {
	dir, err := os.MkdirTemp("", "pgstandby")
	require.NoError(s.t, err)
	s.t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(s.t, os.Chmod(dir, 0o755))
	require.NoError(s.t, os.Chown(dir, int(s.cred.Uid), int(s.cred.Gid)))
	backup := exec.Command(filepath.Join(s.bin, "pg_basebackup"), "-D", filepath.Join(dir, "data"), "-R", "-X", "stream",
		"-h", "127.0.0.1", "-p", primaryPort, "-U", "postgres", "-c", "fast")
	backup.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	out, err := backup.CombinedOutput()
	require.NoError(s.t, err, "%s", out)
	// A standby whose primary is gone retries it every
	// wal_retrieve_retry_interval (5 s by default), and a promotion asked
	// meanwhile waited for it at times (5.0 s of a 3 s lease, once in CI).
	appendFile(s.t, filepath.Join(dir, "data", "postgresql.conf"), "\nwal_retrieve_retry_interval = 100ms\n")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(s.t, err)
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	st := &pgServer{t: s.t, bin: s.bin, dir: dir, port: port, cred: s.cred}
	st.start()
	s.t.Cleanup(func() {
		if st.cmd != nil {
			st.signalAll(syscall.SIGKILL)
			_ = st.cmd.Wait()
		}
	})
	return st
}

// promote ends the standby's recovery (pg_ctl promote, waiting for it).
func (s *pgServer) promote() {
	cmd := exec.Command(filepath.Join(s.bin, "pg_ctl"), "promote", "-D", filepath.Join(s.dir, "data"), "-w", "-t", "10")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	out, err := cmd.CombinedOutput()
	require.NoError(s.t, err, "%s", out)
}

// direct opens a pool straight on the server, bypassing any switch.
func (s *pgServer) direct() *sql.DB {
	db, err := sql.Open("pgx", s.dsn())
	require.NoError(s.t, err)
	s.t.Cleanup(func() { _ = db.Close() })
	return db
}

func viaSwitch(t *testing.T, sw *tcpSwitch) *sql.DB {
	db, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:"+sw.Port()+"/postgres?sslmode=disable&connect_timeout=2")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// failoverRig is a primary, a streaming standby whose replication link
// goes through a switch the test can cut, and an app switch in front of
// the primary that the test retargets to the standby once promoted.
type failoverRig struct {
	primary, standby *pgServer
	pdb, sdb         *sql.DB
	link, app        *tcpSwitch
}

func newFailoverRig(t *testing.T, synchronous bool) *failoverRig {
	primary := startPostgres(t)
	primary.configurePrimary()
	r := &failoverRig{primary: primary, pdb: primary.direct()}
	_, err := r.pdb.ExecContext(t.Context(), `CREATE TABLE orders (id serial PRIMARY KEY)`)
	require.NoError(t, err)
	require.NoError(t, idempotencystore.New(r.pdb, "idem").CreateTable(t.Context()))
	r.link = newSwitch(t, "127.0.0.1:"+primary.port)
	r.standby = primary.startStandby(r.link.Port())
	r.sdb = r.standby.direct()
	state := "async"
	if synchronous {
		state = "sync"
		_, err = r.pdb.ExecContext(t.Context(), `ALTER SYSTEM SET synchronous_standby_names = '*'`)
		require.NoError(t, err)
		_, err = r.pdb.ExecContext(t.Context(), `ALTER SYSTEM SET synchronous_commit = 'on'`)
		require.NoError(t, err)
		_, err = r.pdb.ExecContext(t.Context(), `SELECT pg_reload_conf()`)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		var n int
		err := r.pdb.QueryRowContext(t.Context(), `SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = $1`, state).Scan(&n)
		return err == nil && n == 1
	}, 10*time.Second, 20*time.Millisecond, "the standby streams (%s)", state)
	r.waitReplayed(t)
	r.app = newSwitch(t, "127.0.0.1:"+primary.port)
	return r
}

// waitReplayed waits until the standby has replayed the primary's WAL so far.
func (r *failoverRig) waitReplayed(t *testing.T) {
	var lsn string
	require.NoError(t, r.pdb.QueryRowContext(t.Context(), `SELECT pg_current_wal_lsn()::text`).Scan(&lsn))
	require.Eventually(t, func() bool {
		var ok bool
		err := r.sdb.QueryRowContext(t.Context(), `SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn`, lsn).Scan(&ok)
		return err == nil && ok
	}, 10*time.Second, 20*time.Millisecond, "the standby replays up to %s", lsn)
}

// failover kills the primary (SIGKILL), promotes the standby and moves the
// app's address to it.
func (r *failoverRig) failover(t *testing.T) time.Duration {
	began := time.Now()
	r.standby.promote()
	r.app.Retarget("127.0.0.1:" + r.standby.port)
	return time.Since(began)
}

// orderService is a middleware instance on its own pool (through the app
// switch) and its own store on the shared table, whose handler inserts an
// order and completes the claim in the same transaction (CompleteTx),
// calls beforeCommit, if set, commits, then calls afterCommit, if set,
// before it answers.
func orderService(t *testing.T, db *sql.DB, runs *atomic.Int64, beforeCommit, afterCommit func()) *httptest.Server {
	store := idempotencystore.New(db, "idem")
	handler := orderHandler(db, store, orderSteps{
		beforeCommit: beforeCommit,
		committed: func(err error) {
			if err == nil && afterCommit != nil {
				afterCommit()
			}
		},
	})
	h := idempotency.Middleware(store, idempotency.SharedKeys(), idempotency.Lease(3*time.Second),
		idempotency.WithLogger(slog.New(slog.DiscardHandler)))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		handler(w, r)
	}))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// retryAfterFailover retries the key on srv until it gets an answer other
// than 503 (the instance's pool makes new connections to the new primary).
func retryAfterFailover(t *testing.T, url, key string) (code int, replay, body string, codes []int) {
	deadline := time.Now().Add(8 * time.Second)
	for {
		code, replay, body = postKey(t, url, key)
		codes = append(codes, code)
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return code, replay, body, codes
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func countOrders(t *testing.T, db *sql.DB) (orders, done int) {
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT count(*) FROM orders`).Scan(&orders))
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT count(*) FROM idem WHERE done`).Scan(&done))
	return orders, done
}

// TestPostgresFailoverToASynchronousStandby: a primary and a synchronous
// standby (synchronous_standby_names = '*', synchronous_commit = on); the
// handler inserts an order and completes its claim in that transaction
// (CompleteTx), commits, and the primary is killed (SIGKILL) right after
// the commit, before the handler answers, its replication link cut first
// (the standby has only what the commit waited for). The standby is promoted and the
// app's address moved to it: a retry of the key on another instance gets
// the replay, and the new primary holds one order and its record.
func TestPostgresFailoverToASynchronousStandby(t *testing.T) {
	rig := newFailoverRig(t, true)
	var runs atomic.Int64
	killed := make(chan time.Time, 1)
	a := orderService(t, viaSwitch(t, rig.app), &runs, nil, func() {
		rig.link.Retarget("") // the standby gets nothing after the commit returned
		rig.primary.Kill()
		killed <- time.Now()
	})
	var bRuns atomic.Int64
	bdb := viaSwitch(t, rig.app)
	b := orderService(t, bdb, &bRuns, nil, nil)
	require.NoError(t, bdb.PingContext(t.Context())) // b's pool holds a connection to the old primary

	code, _, body := postKey(t, a.URL, "k")
	assert.Equal(t, http.StatusCreated, code)
	assert.JSONEq(t, `{"order":1}`, body)
	killedAt := <-killed
	promoted := rig.failover(t)
	code, replay, body, codes := retryAfterFailover(t, b.URL, "k")
	t.Logf("primary killed after the commit; promoted in %v; retry on the other instance answered %v, %v after the kill (replayed %q, %s)",
		promoted.Round(time.Millisecond), codes, time.Since(killedAt).Round(time.Millisecond), replay, body)
	assert.Equal(t, http.StatusCreated, code)
	assert.Equal(t, "true", replay, "the record committed with the order survived the failover")
	assert.JSONEq(t, `{"order":1}`, body)
	assert.EqualValues(t, 1, runs.Load()+bRuns.Load(), "one run")
	orders, done := countOrders(t, rig.sdb)
	assert.Equal(t, 1, orders, "one commit on the new primary")
	assert.Equal(t, 1, done)
}

// TestPostgresFailoverToAnAsynchronousStandbyBehind: asynchronous
// replication, with the standby behind (its replication link cut before
// the request, as lag would leave it) when the primary is killed right
// after the handler's commit. The commit is lost with the record in it:
// the promoted standby has neither the order nor the record, a retry runs
// the handler again and commits again. The database then holds one order
// (the first one is gone); the first client got 201 for the lost one.
func TestPostgresFailoverToAnAsynchronousStandbyBehind(t *testing.T) {
	rig := newFailoverRig(t, false)
	var runs atomic.Int64
	standbyOrders := make(chan int, 1)
	killed := make(chan time.Time, 1)
	a := orderService(t, viaSwitch(t, rig.app), &runs, nil, func() {
		n := -1
		_ = rig.sdb.QueryRow(`SELECT count(*) FROM orders`).Scan(&n)
		standbyOrders <- n
		rig.primary.Kill()
		killed <- time.Now()
	})
	var bRuns atomic.Int64
	bdb := viaSwitch(t, rig.app)
	b := orderService(t, bdb, &bRuns, nil, nil)
	require.NoError(t, bdb.PingContext(t.Context()))

	rig.link.Retarget("") // the standby receives nothing more
	code, _, body := postKey(t, a.URL, "k")
	assert.Equal(t, http.StatusCreated, code)
	assert.JSONEq(t, `{"order":1}`, body)
	assert.Equal(t, 0, <-standbyOrders, "the standby had not the commit when the primary was killed")
	killedAt := <-killed
	promoted := rig.failover(t)
	code, replay, body, codes := retryAfterFailover(t, b.URL, "k")
	t.Logf("primary killed after the commit, standby behind; promoted in %v; retry on the other instance answered %v, %v after the kill (replayed %q, %s)",
		promoted.Round(time.Millisecond), codes, time.Since(killedAt).Round(time.Millisecond), replay, body)
	assert.Equal(t, http.StatusCreated, code)
	assert.Empty(t, replay, "the record was lost with the commit: the retry runs")
	assert.EqualValues(t, 1, runs.Load())
	assert.EqualValues(t, 1, bRuns.Load(), "run again on the new primary")
	orders, done := countOrders(t, rig.sdb)
	assert.Equal(t, 1, orders, "one order in the database: the first was lost with its record")
	assert.Equal(t, 1, done)
	code, replay, body, codes = retryAfterFailover(t, a.URL, "k")
	t.Logf("a later retry on the first instance answered %v (replayed %q, %s)", codes, replay, body)
	assert.Equal(t, http.StatusCreated, code)
	assert.Equal(t, "true", replay, "later retries replay the second run")
}

// TestPostgresFailoverBeforeTheCommit: a synchronous standby, and the
// primary killed (its replication link cut first) after the handler's
// CompleteTx but before its commit. The commit fails, the handler
// abandons, and the key's release fails on the dead primary: the claim,
// replicated when it was made, holds on the promoted standby, so a retry
// on another instance gets 409 until the lease runs out, then runs once.
// One order.
func TestPostgresFailoverBeforeTheCommit(t *testing.T) {
	rig := newFailoverRig(t, true)
	var runs atomic.Int64
	killed := make(chan time.Time, 1)
	a := orderService(t, viaSwitch(t, rig.app), &runs, func() {
		rig.link.Retarget("")
		rig.primary.Kill()
		killed <- time.Now()
	}, nil)
	var bRuns atomic.Int64
	bdb := viaSwitch(t, rig.app)
	b := orderService(t, bdb, &bRuns, nil, nil)
	require.NoError(t, bdb.PingContext(t.Context()))

	code, _, _ := postKey(t, a.URL, "k")
	assert.Equal(t, http.StatusServiceUnavailable, code, "the commit failed")
	killedAt := <-killed
	answered := time.Since(killedAt)
	var claims int
	require.NoError(t, rig.sdb.QueryRowContext(t.Context(), `SELECT count(*) FROM idem WHERE NOT done`).Scan(&claims))
	assert.Equal(t, 1, claims, "the claim is on the standby")
	promoted := rig.failover(t)
	retried := time.Since(killedAt) // the first retry: the claim's lease (3 s) runs from about the kill
	var codes []int
	var replay, body string
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		code, replay, body = postKey(t, b.URL, "k")
		codes = append(codes, code)
		if code == http.StatusCreated {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("primary killed before the commit; the first request answered 503 %v after the kill; promoted in %v; retries on the other instance answered %v, the last %v after the kill (replayed %q, %s)",
		answered.Round(time.Millisecond), promoted.Round(time.Millisecond), codes, time.Since(killedAt).Round(time.Millisecond), replay, body)
	assert.Equal(t, http.StatusCreated, code)
	assert.Empty(t, replay)
	for _, c := range codes[:len(codes)-1] {
		assert.Contains(t, []int{http.StatusConflict, http.StatusServiceUnavailable}, c)
	}
	if retried < 2*time.Second {
		assert.Contains(t, codes, http.StatusConflict, "the replicated claim holds the key")
	} else {
		t.Logf("first retried %v after the kill: the claim's lease may have run out before", retried.Round(time.Millisecond))
	}
	assert.EqualValues(t, 1, bRuns.Load())
	orders, done := countOrders(t, rig.sdb)
	assert.Equal(t, 1, orders, "one commit: the first transaction died with the primary")
	assert.Equal(t, 1, done)
}

// Package idempotencystore keeps idempotency records in a SQL database
// (PostgreSQL), through database/sql with any driver.
//
// Its distinction is exactly-once: a handler can write its result under
// its key in its own transaction ([Store.CompleteTx]), so that the effect
// of the request and the record that it happened commit together or not at
// all. A crash after the commit leaves both, and a retry gets the replay; a
// crash or a failed commit before it leaves neither, and a retry runs the
// request again. The other stores can only record the result after the
// effect, with a window between the two.
//
// A claim is a row inserted, or taken over once its lease has run out, by
// one INSERT ... ON CONFLICT DO UPDATE ... WHERE, atomic across replicas,
// after a read of the live record that waits for no lock (so a repeat
// during a commit gets 409 at once);
// renewing, completing and releasing act only on the row that still holds
// the claim's token (the fencing token). Time is the database's, as each
// statement starts (statement_timestamp(), not now(), which in the
// handler's transaction is when that began: a record would be kept its
// TTL less the transaction's age, and a lease checked as of its start),
// so replicas' clocks do not matter. Expired rows stay until
// [Store.DeleteExpired] removes them.
//
// The store's calls take connections from the *sql.DB it is given: a
// claim, each renewal of a running handler's lease and the save, each
// bounded by idempotency.StoreTimeout. On a pool that the handlers' own
// transactions fill (db.SetMaxOpenConns), they wait for a connection: a
// request gets 503, and a running handler can lose its lease (a review:
// three requests on a pool of two, each holding a transaction for 2 s,
// got one 201, one 503 and one 500, where a plain server queued all
// three). Give the store a *sql.DB of its own, or a pool with room for
// its calls beside the handlers'; [Store.CompleteTx] takes the handler's
// transaction, not a connection of the store's.
package idempotencystore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// Store is an [idempotency.Store] in a PostgreSQL table. It is safe for
// concurrent use. Every call honours its context, as database/sql does.
type Store struct {
	db    *sql.DB
	table string
}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// New returns a Store keeping its records in db's table (created by
// [Store.CreateTable]). It panics if table is not a plain SQL identifier.
// The name is used quoted, in lower case: the table that the name unquoted
// stands for, and a reserved word ("order", "user") works too.
func New(db *sql.DB, table string) *Store {
	if !identifier.MatchString(table) {
		panic(fmt.Sprintf("idempotencystore: New: table %q is not a plain identifier", table))
	}
	// Quoted, so that a reserved word ("order", "user") names a table too;
	// in lower case, the table an unquoted name names.
	return &Store{db: db, table: `"` + strings.ToLower(table) + `"`}
}

// CreateTable creates the table if it does not exist.
func (s *Store) CreateTable(ctx context.Context) error {
	_, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+s.table+` (
		key        text PRIMARY KEY,
		token      text NOT NULL,
		record     bytea NOT NULL,
		done       boolean NOT NULL DEFAULT false,
		expires_at timestamptz NOT NULL
	)`)
	return err
}

// ms is a duration in whole milliseconds, as the queries take it,
// rounded up: a lease or TTL is never cut short (review159: a 900 µs
// lease was written expired, and a lease's row ran out before the
// guard's LeaseDeadline).
func ms(d time.Duration) int64 {
	m := d.Milliseconds()
	if d%time.Millisecond > 0 {
		m++
	}
	return m
}

// Begin implements [idempotency.Store].
func (s *Store) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	data, err := json.Marshal(claim)
	if err != nil {
		return nil, err
	}
	for range 3 { // a row may expire between the statements
		// A live record first, read without a lock: a repeat during the
		// commit of a transaction that completes it (CompleteTx) finds the
		// claim at once (409), rather than wait for the row's lock, as an
		// INSERT of the same key would.
		var found []byte
		err := s.db.QueryRowContext(ctx, `SELECT record FROM `+s.table+` WHERE key = $1 AND expires_at > statement_timestamp()`, key).Scan(&found)
		if err == nil {
			var rec idempotency.Record
			if err := json.Unmarshal(found, &rec); err != nil {
				return nil, err
			}
			if rec.Holds(claim) {
				return nil, nil
			}
			return &rec, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		// None: a new key, or an expired one to take over, atomically.
		var claimed bool
		err = s.db.QueryRowContext(ctx, `INSERT INTO `+s.table+` (key, token, record, done, expires_at)
			VALUES ($1, $2, $3, false, statement_timestamp() + $4 * interval '1 millisecond')
			ON CONFLICT (key) DO UPDATE SET token = EXCLUDED.token, record = EXCLUDED.record, done = false,
				expires_at = EXCLUDED.expires_at
			WHERE `+s.table+`.expires_at <= statement_timestamp()
			RETURNING true`, key, claim.Token, data, ms(lease)).Scan(&claimed)
		switch {
		case err == nil:
			return nil, nil
		case writesRefused(err):
			return nil, fmt.Errorf("%w: %w", idempotency.ErrWritesRefused, err)
		case !errors.Is(err, sql.ErrNoRows):
			return nil, err
		}
		// Claimed by another request between the two statements: read it.
	}
	return nil, errors.New("idempotencystore: key kept changing while claimed")
}

// writesRefused reports whether err is the database's refusal to write
// while it reads, by its SQLSTATE (an error with a SQLState method, as
// pgx's): a read-only transaction (25006: default_transaction_read_only,
// a hot standby), a full disk (53100).
func writesRefused(err error) bool {
	var e interface{ SQLState() string }
	if !errors.As(err, &e) {
		return false
	}
	switch e.SQLState() {
	case "25006", "53100":
		return true
	}
	return false
}

// held is the condition of a row that still holds the claim of token $2.
const held = `key = $1 AND token = $2 AND NOT done AND expires_at > statement_timestamp()`

// execHeld runs an update or delete of a held row on q, and returns
// ErrNotOwner if no row held the claim.
func execHeld(ctx context.Context, q interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, query string, args ...any) error {
	res, err := q.ExecContext(ctx, query, args...)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return idempotency.ErrNotOwner
	}
	return nil
}

// Renew implements [idempotency.Store].
func (s *Store) Renew(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) error {
	return execHeld(ctx, s.db, `UPDATE `+s.table+` SET expires_at = statement_timestamp() + $3 * interval '1 millisecond' WHERE `+held,
		key, claim.Token, ms(lease))
}

// Complete implements [idempotency.Store].
func (s *Store) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	return s.complete(ctx, s.db, key, claim, rec, ttl)
}

func (s *Store) complete(ctx context.Context, q interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return execHeld(ctx, q, `UPDATE `+s.table+` SET record = $3, done = true, expires_at = statement_timestamp() + $4 * interval '1 millisecond' WHERE `+held,
		key, claim.Token, data, ms(ttl))
}

// CompleteTx records the response of the request holding c in tx, the
// handler's own transaction, so that it commits with the request's effect
// or not at all, and tells the middleware (c.Completed) to store nothing
// more. If tx then does not commit, the handler calls c.Abandon(), so that
// the key is freed. The response should be the one the handler then
// writes; a body over the guard's idempotency.MaxResponse is stored
// without it, as the middleware stores one, and a repeat of the key is
// refused (idempotency.ErrNotReplayable). It returns
// [idempotency.ErrNotOwner] if the key no longer holds the claim (its
// lease ran out): the handler should then roll back.
//
// The statement is bounded by the claim's lease (c.LeaseDeadline), and
// the handler bounds its transaction, commit included, the same way: begin
// tx under c.WithLeaseDeadline(r.Context()), so that a database that hangs
// cannot hold the request past the time another may take its key. That
// bound follows the lease as it is renewed, so it may be taken as the
// handler begins, however slow its work; from CompleteTx on, the lease is
// no longer renewed, and the commit must end within it. Until
// tx ends, repeats of the key find the claim and get 409 with
// Retry-After: Begin does not wait for tx's lock.
//
// The middleware renews the claim's lease while the handler runs, by
// updating its row: tx takes that row's lock here, so a renewal waits for
// tx to end, and tx must run at READ COMMITTED (PostgreSQL's default). At
// REPEATABLE READ or SERIALIZABLE, a tx that began before a renewal (every
// third of the lease) fails here with a serialization error.
//
// A claim that the guard made on its own records, having failed open
// while the store's connections failed (idempotency.Claim.Local), has no
// row here: CompleteTx writes nothing and returns nil, the effect commits
// alone, and the middleware keeps the result with the claim, at most once
// per process, as for every request then. A claim made here and moved to
// the guard's records since (its renewals failed until its lease ran out,
// the guard failing open) is checked here as any: if its lease ran out
// here, or another replica took the key, CompleteTx returns
// idempotency.ErrNotOwner, and the effect must not commit.
func (s *Store) CompleteTx(ctx context.Context, tx *sql.Tx, c *idempotency.Claim, status int, header http.Header, body []byte) error {
	if c.Local() {
		return nil // no row holds it: the middleware keeps the result where the claim is
	}
	rec := c.Completion(idempotency.Record{Status: status, Header: header, Body: body}) // a body over MaxResponse left out
	ctx, cancel := c.WithLeaseDeadline(ctx)
	defer cancel()
	if err := s.complete(ctx, tx, c.Key, c.Record, rec, c.TTL); err != nil {
		return err
	}
	c.Completed()
	return nil
}

// Release implements [idempotency.Store].
func (s *Store) Release(ctx context.Context, key string, claim idempotency.Record) error {
	return execHeld(ctx, s.db, `DELETE FROM `+s.table+` WHERE `+held, key, claim.Token)
}

// DeleteExpired removes the rows whose lease or TTL has run out, and
// returns how many it removed. Call it from time to time.
func (s *Store) DeleteExpired(ctx context.Context) (int64, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM `+s.table+` WHERE expires_at <= statement_timestamp()`)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

package idempotencystore_test

import (
	"database/sql"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
)

// r159Open returns a pool on s, closed as the test ends.
func r159Open(t testing.TB, s *pgServer) *sql.DB {
	db, err := sql.Open("pgx", s.dsn())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

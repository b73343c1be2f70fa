// Package benchmarks compares resiliencekit's Pipeline with its peers in
// one run: a bare call, a bare gobreaker, cenkalti/backoff, avast/retry-go
// and failsafe-go. It is a module of its own so that the library's go.mod
// does not carry the peers. Run: go test -bench . -benchmem -count 5
package benchmarks

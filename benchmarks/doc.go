// Package benchmarks compares resiliencekit's Pipeline with its peers in
// one run: a bare call, a bare gobreaker, cenkalti/backoff, avast/retry-go
// and failsafe-go. It is a module of its own so that the library's go.mod
// does not carry the peers. The figures of docs/benchmarks.md come from
// go run ./ratios, which runs the benchmarks in rounds and prints each
// subject's ratio to the bare gobreaker of the same round.
package benchmarks

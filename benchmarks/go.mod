module github.com/resiliencekit/resiliencekit/benchmarks

go 1.26.0

require (
	github.com/avast/retry-go/v4 v4.7.0
	github.com/cenkalti/backoff/v4 v4.3.0
	github.com/failsafe-go/failsafe-go v0.9.8
	github.com/resiliencekit/resiliencekit v0.1.0
	github.com/sony/gobreaker/v2 v2.4.0
)

require github.com/bits-and-blooms/bitset v1.24.4 // indirect

module github.com/resiliencekit/resiliencekit/integration

go 1.26.0

replace github.com/resiliencekit/resiliencekit => ../

replace github.com/resiliencekit/resiliencekit/redis => ../redis

require (
	github.com/Shopify/toxiproxy/v2 v2.5.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/resiliencekit/resiliencekit v0.0.0
	github.com/resiliencekit/resiliencekit/redis v0.0.0-00010101000000-000000000000
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
)

require (
	github.com/alicebob/miniredis/v2 v2.40.0 // indirect
	github.com/cenkalti/backoff/v4 v4.3.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/sony/gobreaker/v2 v2.4.0 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

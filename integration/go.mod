module github.com/resiliencekit/resiliencekit/integration

go 1.26.0

replace github.com/resiliencekit/resiliencekit => ../

require (
	github.com/Shopify/toxiproxy/v2 v2.5.0
	github.com/resiliencekit/resiliencekit v0.0.0
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/cenkalti/backoff/v4 v4.3.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/sony/gobreaker/v2 v2.4.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)

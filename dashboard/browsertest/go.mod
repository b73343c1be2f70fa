module github.com/resiliencekit/resiliencekit/dashboard/browsertest

go 1.26.0

require (
	github.com/chromedp/cdproto v0.160.1
	github.com/chromedp/chromedp v0.23.1
	github.com/resiliencekit/resiliencekit v0.1.0
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cenkalti/backoff/v4 v4.3.0 // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/sony/gobreaker/v2 v2.4.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)

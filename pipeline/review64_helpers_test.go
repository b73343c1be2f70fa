package pipeline_test

import (
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
)

func retryAfter64(err error, d time.Duration) error { return resilience.RetryAfter(err, d) }

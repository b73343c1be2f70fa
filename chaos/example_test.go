package chaos_test

import (
	"context"
	"fmt"
	"time"

	"github.com/resiliencekit/resiliencekit/chaos"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func ExampleBackend() {
	backend := chaos.New(time.Second, nil)
	client := httpclient.New(httpclient.Base(backend.Transport()),
		httpclient.WithPipeline(pipeline.New(
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))))))

	fmt.Println(client.GetJSON(context.Background(), "http://backend/", nil))
	backend.SetDown(true) // switch a fault while traffic runs
	fmt.Println(client.GetJSON(context.Background(), "http://backend/", nil))
	fmt.Println("requests received:", backend.Received())
	// Output:
	// <nil>
	// retry: gave up after 3 attempts (max attempts reached): GET http://backend/: 503 Service Unavailable
	// requests received: 4
}

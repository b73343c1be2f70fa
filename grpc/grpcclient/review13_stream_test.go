package grpcclient_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

func TestReview13UploadReplay(t *testing.T) {
	srv := start(t)
	srv.SetFault(grpctest.Upload, grpctest.Fault{Code: codes.Unavailable, After: 2, Calls: 2})
	client, _ := dial(t, srv, grpcclient.WithPipeline(fastPipeline(pipeline.WithTimeBudget(5*time.Second))))
	got, err := client.Upload(t.Context(), []string{"a", "b", "c", "d"})
	require.NoError(t, err)
	assert.Equal(t, "a,b,c,d", got)
	calls := srv.Calls(grpctest.Upload)
	require.Len(t, calls, 3)
	assert.Equal(t, []string{"a", "b", "c", "d"}, calls[2].Received)
	assert.Equal(t, []string{"2"}, calls[2].Metadata.Get("grpc-previous-rpc-attempts"))
}

func TestReview13StreamBudget(t *testing.T) {
	srv := start(t)
	srv.SetFault(grpctest.List, grpctest.Fault{Code: codes.OK, Delay: 3 * time.Second})
	client, _ := dial(t, srv, grpcclient.WithPipeline(fastPipeline(pipeline.WithTimeBudget(200*time.Millisecond), pipeline.WithAttemptTimeout(time.Second))))
	start := time.Now()
	_, err := client.List(t.Context(), "x")
	el := time.Since(start)
	t.Logf("err %v after %v", err, el)
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err))
	assert.Less(t, el, 500*time.Millisecond)
}

// Chat failing after its first echo: committed, error as is, not retried.
func TestReview13ChatFailsAfterCommit(t *testing.T) {
	srv := start(t)
	srv.SetFault(grpctest.Chat, grpctest.Fault{Code: codes.Unavailable, After: 1, Calls: 1})
	ev := &events{}
	client, _ := dial(t, srv, grpcclient.WithPipeline(fastPipeline(pipeline.WithListener(ev), pipeline.WithTimeBudget(5*time.Second))))
	got, err := client.Chat(t.Context(), []string{"a", "b", "c"})
	t.Logf("got %v err %v", got, err)
	assert.Equal(t, codes.Unavailable, status.Code(err))
	assert.Equal(t, 1, srv.Count(grpctest.Chat))
}

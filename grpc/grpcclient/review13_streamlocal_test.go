package grpcclient_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// TestReview13CommittedStreamMarshalErrorOpensBreaker: in a bidi stream
// that has committed (its first reply came), the caller sends a message
// that does not marshal (invalid UTF-8 in a proto3 string). grpc-go
// ends the stream with INTERNAL "error while marshaling": the caller's
// own error, which must not count against the dependency.
func TestReview13CommittedStreamMarshalErrorOpensBreaker(t *testing.T) {
	srv := start(t)
	b := breaker.New("chat", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Minute))
	client, cc := dial(t, srv, grpcclient.WithPipeline(fastPipeline(pipeline.WithBreaker(b))))
	st, err := cc.NewStream(t.Context(), grpctest.ChatDesc, grpctest.Chat)
	require.NoError(t, err)
	require.NoError(t, st.SendMsg(wrapperspb.String("a")))
	require.NoError(t, st.RecvMsg(new(wrapperspb.StringValue)))
	err = st.SendMsg(wrapperspb.String("\xff\xfe"))
	t.Logf("SendMsg: %v", err)
	require.Error(t, err)
	rerr := st.RecvMsg(new(wrapperspb.StringValue))
	t.Logf("RecvMsg: %v (%v)", rerr, status.Code(rerr))
	time.Sleep(50 * time.Millisecond) // the pipeline's call ends with the stream
	_, err = client.Get(t.Context(), "healthy")
	assert.NoError(t, err, "breaker %v", b.State())
}

// TestReview13StreamBadMetadataOpensBreaker: a stream opened with invalid
// outgoing metadata fails in grpc-go before anything is sent.
func TestReview13StreamBadMetadataOpensBreaker(t *testing.T) {
	srv := start(t)
	b := breaker.New("list", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Minute))
	client, _ := dial(t, srv, grpcclient.WithPipeline(fastPipeline(pipeline.WithBreaker(b))))
	ctx := metadata.NewOutgoingContext(t.Context(), metadata.MD{"Bad Key": []string{"v"}})
	_, err := client.List(ctx, "x")
	t.Logf("List: %v", err)
	require.Error(t, err)
	_, err = client.Get(t.Context(), "healthy")
	assert.NoError(t, err, "breaker %v", b.State())
}

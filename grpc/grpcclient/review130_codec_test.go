package grpcclient_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// r130JSON is a JSON codec for proto messages (as gRPC-JSON clients use,
// by content-subtype "json").
type r130JSON struct{}

func (r130JSON) Name() string { return "r130json" }
func (r130JSON) Marshal(v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("not a proto message: %T", v)
	}
	return protojson.Marshal(m)
}
func (r130JSON) Unmarshal(b []byte, v any) error { return protojson.Unmarshal(b, v.(proto.Message)) }

func init() { encoding.RegisterCodec(r130JSON{}) }

// A request the call's codec cannot marshal (here a Duration out of
// protojson's range, which proto.Marshal takes): grpc-go refuses it on the
// client, "grpc: error while marshaling", before anything is sent. The
// caller's own error: it must not count against the dependency's
// breaker, whose opening would fail the valid calls after it.
func TestReview130CodecMarshalErrorIsTheCallersOwn(t *testing.T) {
	srv := startR130(t, grpc.ForceServerCodec(r130JSON{}))
	b := breaker.New("r130c", breaker.ConsecutiveFailures(3))
	ic := grpcclient.New(grpcclient.WithPipeline(pipeline.New(r130Retry(3), pipeline.WithBreaker(b))), grpcclient.RetryMethods(r130Get))
	cc := srv.dial(t, ic.DialOptions()...)
	bad := durationpb.New(time.Second) // seconds set over protojson's limit below
	bad.Seconds = 1_000_000_000_000
	for i := 0; i < 5; i++ {
		err := cc.Invoke(context.Background(), r130Get, bad, new(wrapperspb.StringValue), grpc.CallContentSubtype("r130json"))
		if err == nil {
			t.Fatal("bad request went through")
		}
		if i == 0 {
			t.Logf("error: %v", err)
		}
	}
	if srv.calls.Load() != 0 {
		t.Fatalf("server got %d calls", srv.calls.Load())
	}
	out := new(wrapperspb.StringValue)
	if err := cc.Invoke(context.Background(), r130Get, wrapperspb.String("x"), out, grpc.CallContentSubtype("r130json")); err != nil {
		t.Errorf("a valid call after the caller's own marshaling errors failed: %v (breaker counts %+v)", err, b.Counts())
	}
}

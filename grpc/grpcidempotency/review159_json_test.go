package grpcidempotency_test

import (
	"bytes"
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// r159JSONStore keeps records as the Redis and SQL stores do: in JSON
// (idempotency.Record's MarshalJSON), read back on every Begin.
type r159JSONStore struct{ inner *idempotency.MemoryStore }

func r159RoundTrip(t testing.TB, r idempotency.Record) idempotency.Record {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err)
	}
	var out idempotency.Record
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

func (s r159JSONStore) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	found, err := s.inner.Begin(ctx, key, r159RoundTrip(nil, claim), lease)
	if found != nil {
		rt := r159RoundTrip(nil, *found)
		found = &rt
	}
	return found, err
}
func (s r159JSONStore) Renew(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) error {
	return s.inner.Renew(ctx, key, claim, lease)
}
func (s r159JSONStore) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	return s.inner.Complete(ctx, key, claim, r159RoundTrip(nil, rec), ttl)
}
func (s r159JSONStore) Release(ctx context.Context, key string, claim idempotency.Record) error {
	return s.inner.Release(ctx, key, claim)
}

// r159Visible drops what the transport adds itself.
func r159Visible(md metadata.MD) metadata.MD {
	out := metadata.MD{}
	for k, v := range md {
		switch k {
		case "content-type", "idempotent-replayed", "grpc-accept-encoding":
			continue
		}
		out[k] = v
	}
	return out
}

func r159SameMD(a, b metadata.MD) bool {
	if len(a) != len(b) {
		return false
	}
	for k, va := range a {
		vb := b[k]
		if len(va) != len(vb) {
			return false
		}
		for i := range va {
			if va[i] != vb[i] {
				return false
			}
		}
	}
	return true
}

// TestReview159_ReplayThroughJSONIsExact: the answer of a call, kept as
// the SQL and Redis stores keep it (JSON), is replayed exactly: the
// status (code, message with bytes that are not UTF-8, details), the
// header and trailer metadata, binary values and repeated values
// included; and for a success, the message and the metadata.
func TestReview159_ReplayThroughJSONIsExact(t *testing.T) {
	var runs atomic.Int64
	guard := idempotency.NewGuard(r159JSONStore{idempotency.NewMemoryStore(0)}, idempotency.FailOpenAfter(-1))
	cc := r159Serve(t, guard, func(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		runs.Add(1)
		grpc.SetHeader(ctx, metadata.MD{"h-bin": {"\x00\xff\xfe bin", ""}, "x-multi": {"a", "b", "a"}, "x-empty": {""}})
		grpc.SetTrailer(ctx, metadata.MD{"t-bin": {"\x80\x81"}, "t": {"v1", "v2"}})
		if req.GetValue() == "fail" {
			st, err := status.New(codes.NotFound, "caf\xe9 not found: 100% \n done").WithDetails(wrapperspb.String("detail \xff"[:7]), wrapperspb.Int64(-5))
			if err != nil {
				t.Error(err)
				return nil, status.Error(codes.Internal, "details")
			}
			return nil, st.Err()
		}
		return wrapperspb.String("ok \u00e9"), nil
	})
	for _, msg := range []string{"fail", "ok"} {
		key := "json-" + msg
		first := r159Call(t, cc, key, msg)
		before := runs.Load()
		repeat := r159Call(t, cc, key, msg)
		if runs.Load() != before {
			t.Fatalf("%s: the repeat ran the handler", msg)
		}
		if repeat.header.Get("idempotent-replayed") == nil {
			t.Errorf("%s: repeat not marked as a replay", msg)
		}
		s1, s2 := status.Convert(first.err), status.Convert(repeat.err)
		if !proto.Equal(s1.Proto(), s2.Proto()) {
			t.Errorf("%s: status differs:\nfirst  %v\nreplay %v", msg, s1.Proto(), s2.Proto())
		}
		if first.err == nil && !proto.Equal(first.resp, repeat.resp) {
			t.Errorf("%s: response differs: %v vs %v", msg, first.resp, repeat.resp)
		}
		if !r159SameMD(r159Visible(first.header), r159Visible(repeat.header)) {
			t.Errorf("%s: header differs:\nfirst  %q\nreplay %q", msg, r159Visible(first.header), r159Visible(repeat.header))
		}
		if !r159SameMD(r159Visible(first.trailer), r159Visible(repeat.trailer)) {
			t.Errorf("%s: trailer differs:\nfirst  %q\nreplay %q", msg, r159Visible(first.trailer), r159Visible(repeat.trailer))
		}
	}
	_ = bytes.Equal
}

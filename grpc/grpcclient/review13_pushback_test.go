package grpcclient_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

func TestReview13PushbackValues(t *testing.T) {
	for _, tc := range []struct {
		vals  []string
		code  codes.Code
		calls int
	}{
		{[]string{""}, codes.Unavailable, 1},
		{[]string{"-1"}, codes.Unavailable, 1},
		{[]string{"abc"}, codes.Unavailable, 1},
		{[]string{"99999999999"}, codes.Unavailable, 1},
		{[]string{"0"}, codes.Unavailable, 3},
		{[]string{"1", "1"}, codes.Unavailable, 1},
		{[]string{"+1"}, codes.Unavailable, 3},
		{[]string{"1.5"}, codes.Unavailable, 1},
		{[]string{"-1"}, codes.Aborted, 1},
		{[]string{"0"}, codes.Aborted, 3},
		{[]string{"abc"}, codes.Internal, 1},
		{[]string{"0"}, codes.Internal, 1},
		{[]string{"0"}, codes.NotFound, 1},
	} {
		t.Run(tc.code.String()+"/"+lookup(tc.vals), func(t *testing.T) {
			srv := start(t, grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				_, _ = h(ctx, req)
				md := metadata.MD{}
				for _, v := range tc.vals {
					md.Append("grpc-retry-pushback-ms", v)
				}
				_ = grpc.SetTrailer(ctx, md)
				return nil, status.Error(tc.code, "x")
			}))
			ev := &events{}
			client, _ := dial(t, srv, grpcclient.WithPipeline(fastPipeline(pipeline.WithListener(ev))))
			start := time.Now()
			_, err := client.Get(t.Context(), "x")
			assert.Equal(t, tc.code, status.Code(err))
			assert.Equal(t, tc.calls, srv.Count(grpctest.Get), "%v", err)
			assert.Less(t, time.Since(start), time.Second)
		})
	}
}

func lookup(v []string) string {
	s := ""
	for _, x := range v {
		s += "[" + x + "]"
	}
	return s
}

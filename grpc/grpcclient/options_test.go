package grpcclient_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestOptionsPanicOnNonsense: each nonsense option panics with a message
// that names it.
func TestOptionsPanicOnNonsense(t *testing.T) {
	for _, tc := range []struct {
		option string // the name the message starts with
		make   func() grpcclient.Option
	}{
		{"MaxBreakers(0)", func() grpcclient.Option { return grpcclient.MaxBreakers(0) }},
		{"MaxReplayBuffer(-1)", func() grpcclient.Option { return grpcclient.MaxReplayBuffer(-1) }},
		{"ClassifyCode(OK, transient)", func() grpcclient.Option { return grpcclient.ClassifyCode(codes.OK, resilience.ClassTransient) }},
		{"ClassifyCode(Code(99), transient)", func() grpcclient.Option { return grpcclient.ClassifyCode(codes.Code(99), resilience.ClassTransient) }},
		{"ClassifyCode(Internal, success)", func() grpcclient.Option { return grpcclient.ClassifyCode(codes.Internal, resilience.ClassSuccess) }},
		{"ClassifyCode(Internal, rejected)", func() grpcclient.Option { return grpcclient.ClassifyCode(codes.Internal, resilience.ClassRejected) }},
		{`RetryMethods("")`, func() grpcclient.Option { return grpcclient.RetryMethods("") }},
		{`RetryMethods("Get")`, func() grpcclient.Option { return grpcclient.RetryMethods("Get") }},
		{`RetryMethods("shop.Orders/Get")`, func() grpcclient.Option { return grpcclient.RetryMethods("shop.Orders/Get") }},
		{`RetryMethods("/shop.Orders/")`, func() grpcclient.Option { return grpcclient.RetryMethods("/shop.Orders/") }},
		{`RetryMethods("//Get")`, func() grpcclient.Option { return grpcclient.RetryMethods("//Get") }},
		{`RetryMethods("/shop.Orders/Get/")`, func() grpcclient.Option { return grpcclient.RetryMethods("/shop.Orders/Get/") }},
		{`RetryMethods("/shop..Orders/Get")`, func() grpcclient.Option { return grpcclient.RetryMethods("/shop..Orders/Get") }},
		{`RetryMethods("/shop.Orders/Get it")`, func() grpcclient.Option { return grpcclient.RetryMethods("/shop.Orders/Get it") }},
		{`RetryMethods("/shop.Orders.Get")`, func() grpcclient.Option {
			return grpcclient.RetryMethods("/shop.Orders/Get", "/shop.Orders.Get")
		}},
	} {
		t.Run(tc.option, func(t *testing.T) {
			defer func() {
				r := recover()
				if assert.NotNil(t, r, "no panic") {
					assert.True(t, strings.HasPrefix(fmt.Sprint(r), "grpcclient: "+tc.option+": "), "the panic %q names the option", r)
				}
			}()
			tc.make()
		})
	}
	assert.NotPanics(t, func() {
		grpcclient.New(nil, grpcclient.WithPipeline(nil),
			grpcclient.RetryMethods(), grpcclient.RetryMethods("/shop.Orders/Get", "/Orders/Get", "/a.b.c_1.D/E2", grpctest.Create),
			grpcclient.ClassifyCode(codes.Aborted, resilience.ClassCanceled))
	})
}

// TestRetryMethodsAddsToTheDefaults: a method named by RetryMethods is
// retried, and so, still, are the methods the descriptors call
// idempotent; a method named by neither is not.
func TestRetryMethodsAddsToTheDefaults(t *testing.T) {
	for _, tc := range []struct {
		name              string
		opts              []grpcclient.Option
		getCalls, creates int
	}{
		{name: "defaults: Get (NO_SIDE_EFFECTS) only", getCalls: 3, creates: 1},
		{name: "RetryMethods(Create)", opts: []grpcclient.Option{grpcclient.RetryMethods(grpctest.Create)}, getCalls: 3, creates: 3},
		{name: "RetryMethods of another method", opts: []grpcclient.Option{grpcclient.RetryMethods("/shop.Orders/Get")}, getCalls: 3, creates: 1},
		{name: "given twice, both count", opts: []grpcclient.Option{grpcclient.RetryMethods(grpctest.Create), grpcclient.RetryMethods("/shop.Orders/Get")},
			getCalls: 3, creates: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := start(t)
			client, _ := dial(t, srv, append(tc.opts, grpcclient.WithPipeline(fastPipeline()))...)
			srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable})
			srv.SetFault(grpctest.Create, grpctest.Fault{Code: codes.Unavailable})
			_, err := client.Get(t.Context(), "a")
			assert.Equal(t, codes.Unavailable, status.Code(err))
			_, err = client.Create(t.Context(), "a")
			assert.Equal(t, codes.Unavailable, status.Code(err))
			assert.Equal(t, tc.getCalls, srv.Count(grpctest.Get), "Get's attempts")
			assert.Equal(t, tc.creates, srv.Count(grpctest.Create), "Create's attempts")
		})
	}
}

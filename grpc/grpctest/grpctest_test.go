package grpctest_test

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
)

// TestFaultsAreSwitchedAtRunTime: a fault for n calls fails exactly n,
// one without a count fails until cleared, and every call is recorded.
func TestFaultsAreSwitchedAtRunTime(t *testing.T) {
	srv, err := grpctest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cc, err := grpctest.Dial(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := grpctest.NewClient(cc)

	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.NotFound, Calls: 2})
	var got []codes.Code
	for range 3 {
		_, err := client.Get(t.Context(), "a")
		got = append(got, status.Code(err))
	}
	if want := []codes.Code{codes.NotFound, codes.NotFound, codes.OK}; !equal(got, want) {
		t.Errorf("codes %v, want %v", got, want)
	}
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable})
	for range 2 {
		if _, err := client.Get(t.Context(), "a"); status.Code(err) != codes.Unavailable {
			t.Errorf("err %v, want UNAVAILABLE until cleared", err)
		}
	}
	srv.SetFault(grpctest.Get, grpctest.Fault{})
	if out, err := client.Get(t.Context(), "a"); err != nil || out != "get:a" {
		t.Errorf("after clearing: %q, %v", out, err)
	}
	calls := srv.Calls(grpctest.Get)
	if len(calls) != 6 || calls[0].Received[0] != "a" || calls[0].Code != codes.NotFound || calls[5].Code != codes.OK {
		t.Errorf("calls %+v", calls)
	}
	if out, err := client.Upload(t.Context(), []string{"x", "y"}); err != nil || out != "x,y" {
		t.Errorf("Upload: %q, %v", out, err)
	}
	if out, err := client.Chat(t.Context(), []string{"x", "y"}); err != nil || !equal(out, []string{"x", "y"}) {
		t.Errorf("Chat: %q, %v", out, err)
	}
	srv.Reset()
	if n := srv.Count(grpctest.Get); n != 0 {
		t.Errorf("Count after Reset = %d", n)
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

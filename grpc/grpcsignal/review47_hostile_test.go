package grpcsignal_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
)

// Any server, trusted or not, can stop a grpcclient's retries of its own
// calls with a pushback of -1 (gRFC A6); there is no trust option as
// httpclient's TrustNoRetry. Its effect stays on its own calls: a -1 on
// an OK answer changes nothing, and the next call is retried as usual.
func TestReview47HostileNoRetry(t *testing.T) {
	s, err := grpctest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := grpctest.NewClient(r47Resilient(t, s.Addr, 3))
	s.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable, Pushback: "-1", Calls: 1})
	_, err1 := c.Get(context.Background(), "a")
	n1 := s.Count(grpctest.Get)
	s.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable, Calls: 1})
	_, err2 := c.Get(context.Background(), "b")
	t.Logf("with -1: %v after %d attempt(s); next call without: %v after %d", status.Code(err1), n1, err2, s.Count(grpctest.Get)-n1)
	if n1 != 1 || err2 != nil || s.Count(grpctest.Get)-n1 != 2 {
		t.Errorf("unexpected")
	}
}

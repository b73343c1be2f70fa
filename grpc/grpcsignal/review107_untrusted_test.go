package grpcsignal_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/resiliencekit/resiliencekit/grpc/grpcsignal"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// An outbound HTTPS call to a server whose certificate this service does
// not trust: a fault no retry fixes. grpcsignal.Code's doc: "UNKNOWN for
// another failure that a retry would not fix; INTERNAL when the request
// this service made was at fault"; UNAVAILABLE is what gRPC clients
// retry. Before the session it was INTERNAL (status 500).
func TestReview107UntrustedCertificateCode(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	c := httpclient.New()
	err := c.GetJSON(context.Background(), srv.URL, nil)
	if err == nil {
		t.Fatal("untrusted certificate accepted")
	}
	t.Logf("err %v; class %v; Status %d; Code %v", err, resilience.Classify(err), retrysignal.Status(err), grpcsignal.Code(err))
	if code := grpcsignal.Code(err); code == codes.Unavailable {
		t.Errorf("grpcsignal.Code of an untrusted certificate = UNAVAILABLE (retried by gRPC callers); want INTERNAL or UNKNOWN")
	}
}

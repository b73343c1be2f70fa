package grpcclient_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// r99Rig is an interceptor with one breaker per target (5 failures in a row
// open it for a minute), remembered so that the test can read it.
type r99Rig struct {
	ic *grpcclient.Interceptor
	b  *breaker.Breaker
}

func r99NewRig() *r99Rig {
	r := &r99Rig{}
	p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))))
	r.ic = grpcclient.New(grpcclient.WithPipeline(p), grpcclient.BreakerPerTarget(func(target string) *breaker.Breaker {
		r.b = breaker.New(target, breaker.ConsecutiveFailures(5), breaker.OpenTimeout(time.Minute))
		return r.b
	}))
	return r
}

// r99SmallHeaders starts a server that takes 8 KiB of headers and dials
// it through a rig; the context has 10 s.
func r99SmallHeaders(t *testing.T) (*grpctest.Server, *r99Rig, *grpctest.Client, context.Context) {
	t.Helper()
	srv, err := grpctest.Start(grpc.MaxHeaderListSize(8 << 10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	r := r99NewRig()
	cc, err := grpctest.Dial(srv.Addr, r.ic.DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return srv, r, grpctest.NewClient(cc), ctx
}

// A caller whose outgoing metadata is larger than the server's advertised
// SETTINGS_MAX_HEADER_LIST_SIZE gets grpc-go's own INTERNAL ("header list
// size to send violates the maximum size ... set by server"), made on the
// client before anything is sent: the caller's error, like invalid
// metadata, which must never count against the dependency. Counted, five
// of them open the breaker, and then a healthy call fails.
func TestReview99OversizedOutgoingMetadataDoesNotCount(t *testing.T) {
	srv, r, client, ctx := r99SmallHeaders(t)
	if _, err := client.Get(ctx, "warm"); err != nil { // the server's SETTINGS are known from now on
		t.Fatal(err)
	}
	big := metadata.AppendToOutgoingContext(ctx, "x-big", strings.Repeat("a", 16<<10))
	var firstErr error
	for range 6 {
		_, err := client.Get(big, "big")
		if err == nil {
			t.Fatal("a call with 16 KiB of metadata went through a server that takes 8 KiB")
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	t.Logf("oversized metadata: %v (class %v)", firstErr, resilience.Classify(firstErr))
	t.Logf("breaker after: %v %+v; server got %d Get calls", r.b.State(), r.b.Counts(), srv.Count(grpctest.Get))
	if got, err := client.Get(ctx, "after"); err != nil {
		t.Errorf("a healthy call after the caller's own oversized-metadata errors failed: %v (%q); a plain client completes it", err, got)
	}
	if n := r.b.Counts().TotalFailures; n != 0 {
		t.Errorf("the breaker counted %d failures for errors made on the client (the caller's metadata): want 0", n)
	}
}

// r99Cert makes a self-signed certificate for 127.0.0.1 and "localhost".
func r99Cert(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "localhost"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// grpc.CallAuthority with a name the server's certificate does not cover
// is refused by grpc-go on the client, before the stream is opened, with
// UNAVAILABLE ("failed to validate authority"): the caller's own option,
// never sent. It must be neither retried nor counted; a transient
// UNAVAILABLE is both.
func TestReview99BadCallAuthorityIsTheCallersError(t *testing.T) {
	cert, pool := r99Cert(t)
	srv, err := grpctest.Start(grpc.Creds(credentials.NewServerTLSFromCert(&cert)))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	r := r99NewRig()
	creds := credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "localhost"})
	cc, err := grpc.NewClient("passthrough:///"+srv.Addr, append(r.ic.DialOptions(), grpc.WithTransportCredentials(creds))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := grpctest.NewClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := client.Get(ctx, "warm"); err != nil {
		t.Fatal(err)
	}
	var codeSeen codes.Code
	for range 6 {
		_, err := client.Get(ctx, "x", grpc.CallAuthority("evil.example.com"))
		if err == nil {
			t.Fatal("a call with an authority the certificate does not cover went through")
		}
		codeSeen = status.Code(err)
		t.Logf("bad authority: %v (class %v)", err, resilience.Classify(err))
	}
	t.Logf("code %v; breaker: %v %+v", codeSeen, r.b.State(), r.b.Counts())
	if _, err := client.Get(ctx, "after"); err != nil {
		t.Errorf("a healthy call after the caller's own bad CallAuthority failed: %v; a plain client completes it", err)
	}
	if n := r.b.Counts().TotalFailures; n != 0 {
		t.Errorf("the breaker counted %d failures for a CallAuthority refused on the client: want 0", n)
	}
}

// The stream path of the same: a Chat stream (IDEMPOTENT) whose outgoing
// metadata is over the server's advertised header-list limit.
func TestReview99OversizedMetadataOnAStreamDoesNotCount(t *testing.T) {
	_, _, client, ctx := r99SmallHeaders(t)
	if _, err := client.Chat(ctx, []string{"warm"}); err != nil {
		t.Fatal(err)
	}
	big := metadata.AppendToOutgoingContext(ctx, "x-big", strings.Repeat("a", 16<<10))
	for range 6 {
		if _, err := client.Chat(big, []string{"a"}); err == nil {
			t.Fatal("went through")
		}
	}
	if _, err := client.Chat(ctx, []string{"after"}); err != nil {
		t.Errorf("a healthy stream after the caller's own oversized-metadata errors failed: %v", err)
	}
}

// A caller's deadline far in the future (290 years): grpc-go sends it as
// a capped grpc-timeout and the call completes; through the interceptor,
// with or without an attempt timeout, it must too.
func TestReview99HugeDeadline(t *testing.T) {
	srv, err := grpctest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for _, p := range []*pipeline.Pipeline{
		nil,
		pipeline.New(pipeline.WithAttemptTimeout(time.Second), pipeline.WithRetry(retrypolicy.New())),
		pipeline.New(pipeline.WithTimeBudget(time.Duration(1<<62)), pipeline.WithRetry(retrypolicy.New())),
	} {
		cc, err := grpctest.Dial(srv.Addr, grpcclient.New(grpcclient.WithPipeline(p)).DialOptions()...)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(290*365*24*time.Hour))
		client := grpctest.NewClient(cc)
		if _, err := client.Get(ctx, "x"); err != nil {
			t.Errorf("unary with a huge deadline: %v", err)
		}
		if _, err := client.List(ctx, "x"); err != nil {
			t.Errorf("stream with a huge deadline: %v", err)
		}
		if _, err := client.Create(ctx, "x"); err != nil {
			t.Errorf("create with a huge deadline: %v", err)
		}
		cancel()
		cc.Close()
	}
}

package grpcsignal_test

import (
	"context"
	"net/http"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/resiliencekit/resiliencekit/grpc/grpcsignal"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

type review106Hostile struct{}

func (review106Hostile) Error() string { return "hostile" }
func (review106Hostile) Unwrap() error { panic("unwrap panics") }

// retrysignal.Handler answers 500 for an error whose methods panic (this
// session); grpcsignal's server interceptors ask the same
// retrysignal.Retried unprotected: the panic goes up through the
// interceptor, and grpc-go does not recover a handler's panic (the
// process dies).
func TestReview106InterceptorHostileError(t *testing.T) {
	rec := &review106Recorder{h: http.Header{}}
	retrysignal.Handler(func(http.ResponseWriter, *http.Request) error { return review106Hostile{} }).ServeHTTP(rec, &http.Request{})
	if rec.code != http.StatusInternalServerError {
		t.Fatalf("retrysignal.Handler: %d, want 500 (the session's promise)", rec.code)
	}
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("grpcsignal.UnaryServerInterceptor panicked on a handler's error whose methods panic (retrysignal.Handler answers 500): %v", r)
		}
	}()
	_, err := grpcsignal.UnaryServerInterceptor(context.Background(), nil, &grpc.UnaryServerInfo{}, func(context.Context, any) (any, error) {
		return nil, review106Hostile{}
	})
	if err == nil {
		t.Errorf("error lost")
	}
	_ = codes.OK
}

type review106Recorder struct {
	h    http.Header
	code int
}

func (r *review106Recorder) Header() http.Header         { return r.h }
func (r *review106Recorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *review106Recorder) WriteHeader(c int)           { r.code = c }

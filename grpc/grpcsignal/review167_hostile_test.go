package grpcsignal_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime/debug"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/grpc/grpcsignal"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// r167Uncomparable is a handler's status error that wraps itself by
// value (a typo for its cause); its type holds a slice, so it is not
// comparable. grpc-go finds its status on it at once.
type r167Uncomparable struct{ details []string }

func (e r167Uncomparable) Error() string              { return "not found" }
func (e r167Uncomparable) GRPCStatus() *status.Status { return status.New(codes.NotFound, "nope") }
func (e r167Uncomparable) Unwrap() error              { return e }

// r167Fresh makes a new error at each Unwrap (&e of a value receiver).
type r167Fresh struct{ msg string }

func (e r167Fresh) Error() string              { return e.msg }
func (e r167Fresh) GRPCStatus() *status.Status { return status.New(codes.NotFound, e.msg) }
func (e r167Fresh) Unwrap() error              { return &e }

// r167IsLoop has no Unwrap: its Is method asks errors.Is of its next,
// which is itself.
type r167IsLoop struct{ next error }

func (e *r167IsLoop) Error() string              { return "is loop" }
func (e *r167IsLoop) GRPCStatus() *status.Status { return status.New(codes.NotFound, "is loop") }
func (e *r167IsLoop) Is(t error) bool            { return errors.Is(e.next, t) }

// r167AsLoop likewise for As.
type r167AsLoop struct{ next error }

func (e *r167AsLoop) Error() string              { return "as loop" }
func (e *r167AsLoop) GRPCStatus() *status.Status { return status.New(codes.NotFound, "as loop") }
func (e *r167AsLoop) As(t any) bool              { return errors.As(e.next, t) }

func r167Within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Errorf("%s: no answer after %v, where a plain grpc-go server answers at once", what, d)
	}
}

func r167Call(err error) (any, error) {
	return grpcsignal.UnaryServerInterceptor(context.Background(), nil, &grpc.UnaryServerInfo{},
		func(context.Context, any) (any, error) { return nil, err })
}

// Promise (CHANGELOG review164, Acyclic): the interceptor answers as a
// plain server would, never hangs.
func TestReview167InterceptorUncomparableSelfWrap(t *testing.T) {
	err := r167Uncomparable{details: []string{"x"}}
	if s, ok := status.FromError(err); !ok || s.Code() != codes.NotFound {
		t.Fatalf("plain grpc-go: %v %v", s, ok)
	}
	r167Within(t, 2*time.Second, "UnaryServerInterceptor", func() { _, _ = r167Call(err) })
	r167Within(t, 2*time.Second, "retrysignal.Status", func() { _ = retrysignal.Status(err) })
	r167Within(t, 2*time.Second, "grpcsignal.Code", func() { _ = grpcsignal.Code(err) })
}

func TestReview167InterceptorFreshChain(t *testing.T) {
	err := r167Fresh{msg: "fresh"}
	if s, ok := status.FromError(err); !ok || s.Code() != codes.NotFound {
		t.Fatalf("plain grpc-go: %v %v", s, ok)
	}
	r167Within(t, 2*time.Second, "UnaryServerInterceptor", func() { _, _ = r167Call(err) })
}

// An Is or As method that recurses for ever overflows the stack: a fatal
// error, not a panic. Run in a child process.
func TestReview167InterceptorIsAsLoop(t *testing.T) {
	if os.Getenv("R167_CHILD") == "" {
		t.Skip("known limit (resilience.Acyclic's doc): an Is or As method that calls errors.Is on its own error overflows the stack of any errors.Is")
	}
	if which := os.Getenv("R167_CHILD"); which != "" {
		debug.SetMaxStack(32 << 20)
		var err error
		if which == "is" {
			e := &r167IsLoop{}
			e.next = e
			err = e
		} else {
			e := &r167AsLoop{}
			e.next = e
			err = e
		}
		_, got := r167Call(err)
		if status.Code(got) != codes.NotFound {
			os.Exit(3)
		}
		os.Exit(0)
	}
	for _, which := range []string{"is", "as"} {
		// plain grpc-go: the status is on the error itself.
		if which == "is" {
			e := &r167IsLoop{}
			e.next = e
			if s, ok := status.FromError(e); !ok || s.Code() != codes.NotFound {
				t.Fatal("plain")
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestReview167InterceptorIsAsLoop$")
		cmd.Env = append(os.Environ(), "R167_CHILD="+which, "GOMAXPROCS=1")
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			tail := string(out)
			if len(tail) > 300 {
				tail = tail[:300]
			}
			t.Errorf("%s loop: the interceptor did not answer NotFound as grpc-go would: %v\n%s", which, err, tail)
		}
	}
}

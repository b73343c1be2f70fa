package resilience_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// review168: trees that end, as real programs make them, come back as is.

func review168Typical() error {
	op := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1},
		Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	ue := &url.Error{Op: "Get", URL: "http://127.0.0.1:1/", Err: op}
	return fmt.Errorf("fetch user: %w", ue)
}

func review168Same(t *testing.T, name string, err error) {
	t.Helper()
	got := resilience.Acyclic(err)
	// compare by identity without ==, which may panic on uncomparable types
	if fmt.Sprintf("%p|%T", any(got), got) != fmt.Sprintf("%p|%T", any(err), err) {
		t.Errorf("%s: Acyclic changed a tree that ends: got %T", name, got)
		return
	}
	if got.Error() != err.Error() {
		t.Errorf("%s: message changed", name)
	}
}

func TestReview168RealTreesComeBackAsIs(t *testing.T) {
	review168Same(t, "typical", review168Typical())

	// deep fmt.Errorf chain (messages grow with depth: 1,000 deep)
	var f error = syscall.ECONNRESET
	for i := 0; i < 1_000; i++ {
		f = fmt.Errorf("l%d: %w", i, f)
	}
	review168Same(t, "fmt.Errorf chain of 1,000", f)
	// 99,999 wrappers + leaf = 100,000 errors (a wrapper with a fixed message)
	var e error = syscall.ECONNRESET
	for i := 0; i < 99_999; i++ {
		e = &review168Wrap{e}
	}
	review168Same(t, "chain of 100,000", e)
	if !errors.Is(resilience.Acyclic(e), syscall.ECONNRESET) {
		t.Error("chain of 100,000: lost its leaf")
	}

	// errors.Join of many leaves (50k) - one error walked each
	leaves := make([]error, 50_000)
	for i := range leaves {
		leaves[i] = errors.New("leaf")
	}
	review168Same(t, "join of 50k leaves", errors.Join(leaves...))

	// join of 49,999 wrapped leaves: 1 + 2*49,999 = 99,999 walked
	wl := make([]error, 49_999)
	for i := range wl {
		wl[i] = fmt.Errorf("w: %w", context.DeadlineExceeded)
	}
	review168Same(t, "join of 49,999 wrapped leaves", errors.Join(wl...))

	// a join of typical errors (each 5 deep: wrap, url, op, syscall, errno)
	tl := make([]error, 10_000)
	for i := range tl {
		tl[i] = review168Typical()
	}
	review168Same(t, "join of 10k typical", errors.Join(tl...))

	// os / fs errors
	_, err := os.Open("/nonexistent/review168")
	review168Same(t, "os.Open", fmt.Errorf("load: %w", err))
	review168Same(t, "fs.PathError", &fs.PathError{Op: "read", Path: "x", Err: fs.ErrPermission})
	// net.DNSError (no Unwrap until 1.23; has it now)
	review168Same(t, "DNSError", fmt.Errorf("x: %w", &net.DNSError{Err: "no such host", Name: "x", IsNotFound: true, UnwrapErr: errors.New("nf")}))

}

// A 2^12-path shared join of a 5-deep branch walks about 2^12*6 + joins <
// 100k: must come back as is.
func TestReview168SharedBranchUnderLimitAsIs(t *testing.T) {
	shared := review168Typical()
	j := errors.Join(shared)
	for range 12 {
		j = errors.Join(j, j)
	}
	review168Same(t, "2^12 shared", j)
}

// A tree that does not end keeps its class (via ResilienceClass of top)
// and message.
type review168Classed struct{ self error }

func (e *review168Classed) Error() string                     { return "classed" }
func (e *review168Classed) Unwrap() error                     { return e.self }
func (e *review168Classed) ResilienceClass() resilience.Class { return resilience.ClassTerminal }

func TestReview168EndlessKeepsClassAndMessage(t *testing.T) {
	e := &review168Classed{}
	e.self = e
	got := resilience.Acyclic(e)
	if got.Error() != "classed" || resilience.Classify(got) != resilience.ClassTerminal {
		t.Fatalf("endless: message %q class %v", got.Error(), resilience.Classify(got))
	}
	// wrapped in a fmt.Errorf: what class? the message is kept
	w := fmt.Errorf("op: %w", e)
	got = resilience.Acyclic(w)
	if got.Error() != w.Error() {
		t.Fatalf("endless wrapped: message %q", got.Error())
	}
	// the class the wrapped error gives: Classify on the original would
	// hang; the doc promises only the top error's own class. Note it.
	t.Logf("wrapped endless classed %v (top's own class: none -> transient)", resilience.Classify(got))
}

// Concurrency: Acyclic from many goroutines on one tree.
func TestReview168Concurrent(t *testing.T) {
	e := review168Typical()
	done := make(chan bool)
	for range 8 {
		go func() {
			ok := true
			for range 1000 {
				if resilience.Acyclic(e) != e {
					ok = false
				}
			}
			done <- ok
		}()
	}
	for range 8 {
		if !<-done {
			t.Fatal("changed under concurrency")
		}
	}
}

// Allocation: the typical error costs none.
func TestReview168TypicalNoAlloc(t *testing.T) {
	e := review168Typical()
	if n := testing.AllocsPerRun(1000, func() { _ = resilience.Acyclic(e) }); n != 0 {
		t.Fatalf("Acyclic of a typical error allocates %v", n)
	}
}

// --- the review167 version, copied, for the cost comparison ---

const review168OldMaxJoins = 10_000

func review168OldAcyclic(err error) error {
	switch err.(type) {
	case nil:
		return nil
	case interface{ Unwrap() error }, interface{ Unwrap() []error }:
		if !review168OldEndsSafely(err) {
			return errors.New(err.Error())
		}
	}
	return err
}

func review168OldEndsSafely(err error) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = true
		}
	}()
	return review168OldEnds(err, 0)
}

func review168OldEnds(err error, depth int) bool {
	slow := err
	for step := 0; ; step++ {
		switch u := err.(type) {
		case nil:
			return true
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			if depth >= review168OldMaxJoins {
				return false
			}
			for _, e := range u.Unwrap() {
				if !review168OldEnds(e, depth+1) {
					return false
				}
			}
			return true
		default:
			return true
		}
		if step%2 == 1 {
			slow = slow.(interface{ Unwrap() error }).Unwrap()
		}
		if err != nil && err == slow {
			return false
		}
	}
}

var review168Sink error

func BenchmarkReview168AcyclicTypicalNew(b *testing.B) {
	e := review168Typical()
	b.ReportAllocs()
	for b.Loop() {
		review168Sink = resilience.Acyclic(e)
	}
}

func BenchmarkReview168AcyclicTypicalOld(b *testing.B) {
	e := review168Typical()
	b.ReportAllocs()
	for b.Loop() {
		review168Sink = review168OldAcyclic(e)
	}
}

func BenchmarkReview168AcyclicDeep20New(b *testing.B) {
	e := review168Typical()
	for range 16 {
		e = fmt.Errorf("x: %w", e)
	}
	b.ReportAllocs()
	for b.Loop() {
		review168Sink = resilience.Acyclic(e)
	}
}

func BenchmarkReview168AcyclicDeep20Old(b *testing.B) {
	e := review168Typical()
	for range 16 {
		e = fmt.Errorf("x: %w", e)
	}
	b.ReportAllocs()
	for b.Loop() {
		review168Sink = review168OldAcyclic(e)
	}
}

// An uncomparable error type in a finite chain: returned as is.
type review168Uncomparable struct {
	tags []string
	err  error
}

func (e review168Uncomparable) Error() string { return "u: " + e.err.Error() }
func (e review168Uncomparable) Unwrap() error { return e.err }

func TestReview168UncomparableFiniteChainAsIs(t *testing.T) {
	var e error = review168Uncomparable{tags: []string{"a"}, err: review168Typical()}
	for range 50 {
		e = review168Uncomparable{tags: []string{"b"}, err: e}
	}
	got := resilience.Acyclic(e)
	if _, ok := got.(review168Uncomparable); !ok || !errors.Is(got, syscall.ECONNREFUSED) {
		t.Fatalf("uncomparable finite chain changed: %T", got)
	}
}

// A batch's join of 50,000 item errors, each wrapped once ("item %d: %w"):
// 100,001 errors walked, so it is "taken for one that does not end", and
// its class becomes transient (the join gives itself none), whatever its
// leaves say. Assert the class Classify gives the original is kept.
func TestReview168WideJoinOfWrappedTerminalKeepsClass(t *testing.T) {
	leaf := review168Term{}
	items := make([]error, 50_000)
	for i := range items {
		items[i] = fmt.Errorf("item %d: %w", i, leaf)
	}
	j := errors.Join(items...)
	want := resilience.Classify(j)
	got := resilience.Acyclic(j)
	if gc := resilience.Classify(got); gc != want {
		t.Fatalf("join of 50,000 wrapped %v errors: class %v after Acyclic (was %v); same type back: %v", want, gc, want, fmt.Sprintf("%T", got) == fmt.Sprintf("%T", j))
	}
}

type review168Term struct{}

func (review168Term) Error() string                     { return "bad request" }
func (review168Term) ResilienceClass() resilience.Class { return resilience.ClassTerminal }

func review168UncomparableChain(n int) error {
	var e error = review168Uncomparable{tags: []string{"a"}, err: review168Typical()}
	for range n {
		e = review168Uncomparable{tags: []string{"b"}, err: e}
	}
	return e
}

func BenchmarkReview168AcyclicUncomparable10New(b *testing.B) {
	e := review168UncomparableChain(10)
	b.ReportAllocs()
	for b.Loop() {
		review168Sink = resilience.Acyclic(e)
	}
}

func BenchmarkReview168AcyclicUncomparable10Old(b *testing.B) {
	e := review168UncomparableChain(10)
	b.ReportAllocs()
	for b.Loop() {
		review168Sink = review168OldAcyclic(e)
	}
}

// An uncomparable chain of 10 value errors (a struct with a slice field,
// as some libraries' error values are): Acyclic of it allocates nothing,
// as for any error that ends.
func TestReview168UncomparableChainNoAlloc(t *testing.T) {
	e := review168UncomparableChain(10)
	if n := testing.AllocsPerRun(200, func() { _ = resilience.Acyclic(e) }); n != 0 {
		t.Fatalf("Acyclic of a 10-deep chain of uncomparable value errors allocates %v per call", n)
	}
}

type review168Wrap struct{ err error }

func (e *review168Wrap) Error() string { return "w" }
func (e *review168Wrap) Unwrap() error { return e.err }

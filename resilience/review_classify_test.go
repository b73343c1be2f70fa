package resilience

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
)

// oldClassify is Classify before the fast path (as in the previous
// revision).
func oldClassify(err error) Class {
	if err == nil {
		return ClassSuccess
	}
	if c, ok := ClassOf(err); ok {
		return c
	}
	if errors.Is(err, context.Canceled) {
		return ClassCanceled
	}
	return ClassTransient
}

type rvSlice []int // non-comparable, no methods but Error

func (rvSlice) Error() string { return "slice" }

type rvMap map[string]int

func (rvMap) Error() string { return "map" }

type rvStructSlice struct{ s []error }

func (e rvStructSlice) Error() string   { return "structslice" }
func (e rvStructSlice) Unwrap() []error { return e.s }

type rvIsCanceled struct{ f func() }

func (rvIsCanceled) Error() string            { return "is" }
func (rvIsCanceled) Is(target error) bool     { return target == context.Canceled }
func (rvIsCanceledPtr) Error() string         { return "isptr" }
func (*rvIsCanceledPtr) Is(target error) bool { return target == context.Canceled }

type rvIsCanceledPtr struct{ n int }

type rvNilPtr struct{ msg string }

func (e *rvNilPtr) Error() string { return "nilptr" }

type rvNilPtrDeref struct{ msg string }

func (e *rvNilPtrDeref) Error() string        { return e.msg }
func (e *rvNilPtrDeref) Is(target error) bool { return e.msg == "x" }

type rvClassValue struct{ c Class }

func (e rvClassValue) Error() string          { return "cv" }
func (e rvClassValue) ResilienceClass() Class { return e.c }

type rvClassNilPtr struct{ c Class }

func (e *rvClassNilPtr) Error() string          { return "cnp" }
func (e *rvClassNilPtr) ResilienceClass() Class { return ClassPermanent } // safe on nil

type rvUnwrapNil struct{}

func (rvUnwrapNil) Error() string { return "un" }
func (rvUnwrapNil) Unwrap() error { return nil }

type rvUnwrapPtrOnly struct{ err error }

func (rvUnwrapPtrOnly) Error() string  { return "upo" }
func (*rvUnwrapPtrOnly) Unwrap() error { return context.Canceled }

type rvEmbedClass struct{ *classError }

type rvOtherUnwrap struct{}

func (rvOtherUnwrap) Error() string    { return "ou" }
func (rvOtherUnwrap) UnwrapAll() []any { return nil } // not error's shape

type rvFuncErr func() string

func (f rvFuncErr) Error() string { return "func" }

type rvChanErr chan int

func (rvChanErr) Error() string { return "chan" }

type rvIsPanics struct{}

func (rvIsPanics) Error() string { return "isp" }
func (rvIsPanics) Is(error) bool { panic("Is") }

type rvStringErr string

func (e rvStringErr) Error() string { return string(e) }

func classifyBoth(err error) (newC, oldC Class, newP, oldP any) {
	func() {
		defer func() { newP = recover() }()
		newC = Classify(err)
	}()
	func() {
		defer func() { oldP = recover() }()
		oldC = oldClassify(err)
	}()
	return
}

func TestReviewClassifyAsBefore(t *testing.T) {
	var nilNil *rvNilPtr
	var nilDeref *rvNilPtrDeref
	var nilClass *rvClassNilPtr
	var nilClassErr *classError
	var nilIsPtr *rvIsCanceledPtr
	var nilPathErr *os.PathError
	var nilOpErr *net.OpError
	base := []error{
		nil,
		errors.New("x"),
		context.Canceled,
		context.DeadlineExceeded,
		io.EOF,
		rvSlice{1},
		rvSlice(nil),
		rvMap{"a": 1},
		rvMap(nil),
		rvStructSlice{[]error{context.Canceled}},
		rvStructSlice{[]error{nil, errors.New("y")}},
		rvStructSlice{nil},
		rvIsCanceled{},
		&rvIsCanceledPtr{},
		rvIsCanceledPtr{},
		nilIsPtr,
		nilNil,
		nilDeref,
		&rvNilPtrDeref{msg: "x"},
		rvClassValue{ClassTerminal},
		rvClassValue{ClassCanceled},
		nilClass,
		nilClassErr,
		rvUnwrapNil{},
		rvUnwrapPtrOnly{},
		&rvUnwrapPtrOnly{},
		rvEmbedClass{&classError{err: context.Canceled, class: ClassPermanent}},
		rvEmbedClass{},
		rvOtherUnwrap{},
		rvFuncErr(nil),
		rvFuncErr(func() string { return "" }),
		rvChanErr(nil),
		rvIsPanics{},
		rvStringErr("context canceled"),
		nilPathErr,
		nilOpErr,
		&os.PathError{Op: "x", Err: context.Canceled},
		&net.OpError{Op: "dial", Err: context.DeadlineExceeded},
		Permanent(context.Canceled),
		Terminal(errors.New("t")),
		Rejected(context.DeadlineExceeded),
		context.Cause(canceledCtx()),
		fmt.Errorf("plain %s", "x"),
	}
	shapes := []func(error) error{
		func(e error) error { return e },
		func(e error) error { return fmt.Errorf("w: %w", e) },
		func(e error) error { return fmt.Errorf("w: %w, %w", errors.New("a"), e) },
		func(e error) error { return errors.Join(e) },
		func(e error) error { return errors.Join(errors.New("a"), e) },
		func(e error) error { return errors.Join(e, context.Canceled) },
		func(e error) error { return errors.Join(e, Permanent(errors.New("p"))) },
		func(e error) error { return rvStructSlice{[]error{e}} },
		func(e error) error { return Permanent(e) },
		func(e error) error { return fmt.Errorf("w: %w", fmt.Errorf("v: %w", e)) },
		func(e error) error { return &os.PathError{Op: "o", Err: e} },
	}
	n := 0
	for i, b := range base {
		for j, s := range shapes {
			err := s(b)
			if err == nil && b != nil {
				continue
			}
			nc, oc, np, op := classifyBoth(err)
			n++
			if nc != oc || fmt.Sprint(np) != fmt.Sprint(op) {
				t.Errorf("base %d (%T) shape %d (%T): new %v (panic %v), old %v (panic %v)", i, b, j, err, nc, np, oc, op)
			}
		}
	}
	t.Logf("%d errors compared", n)
}

func canceledCtx() context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(nil)
	return ctx
}

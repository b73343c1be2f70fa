package grpcidempotency

import (
	"context"
	"fmt"
)

// Option configures [UnaryServerInterceptor]; the options of the guard it
// runs calls on are idempotency's.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	required   bool
	maxRequest int
	scope      func(ctx context.Context) string
	shared     bool // SharedKeys applies: "" is the one namespace
}

func newConfig(opts []Option) config {
	cfg := config{maxRequest: 1 << 20}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	return cfg
}

// Required makes a key mandatory on every unary method: a call without
// one gets INVALID_ARGUMENT, and the handler does not run. Default: calls
// without a key pass through unprotected.
func Required() Option { return optionFunc(func(c *config) { c.required = true }) }

// MaxRequest sets the largest marshaled request message fingerprinted; a
// call with a larger one gets INVALID_ARGUMENT. Default 1 MiB. It panics
// if n < 1.
func MaxRequest(n int) Option {
	if n < 1 {
		panic(fmt.Sprintf("grpcidempotency: MaxRequest(%d): n must be 1 or more", n))
	}
	return optionFunc(func(c *config) { c.maxRequest = n })
}

// Scope sets a function of a call's context (its incoming metadata, its
// peer, its method by grpc.Method) whose result namespaces keys, such as
// the authenticated account, so that two callers cannot collide or read
// each other's answers: who the caller is (the authenticated subject, the
// peer's certificate), not a credential that changes when refreshed. There
// is no default: [UnaryServerInterceptor] panics unless given Scope or
// [SharedKeys] (the one given last applies). A keyed call for which fn returns ""
// (no identity: the caller is not authenticated, or the interceptor runs
// before authentication) is refused with UNAUTHENTICATED, and the handler
// does not run: an empty scope is never a shared namespace, only
// SharedKeys is. It panics if fn is nil.
func Scope(fn func(ctx context.Context) string) Option {
	if fn == nil {
		panic("grpcidempotency: Scope(nil): use SharedKeys for one namespace")
	}
	return optionFunc(func(c *config) { c.scope, c.shared = fn, false })
}

// SharedKeys puts every caller's keys in one namespace: a caller that
// reuses another's key gets its answer. For services whose callers are
// one trusted party. [UnaryServerInterceptor] needs it or [Scope]: there
// is no default.
func SharedKeys() Option {
	return optionFunc(func(c *config) { c.scope, c.shared = func(context.Context) string { return "" }, true })
}

package grpcidempotency

import (
	"context"
	"fmt"

	"google.golang.org/grpc/metadata"
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
}

func newConfig(opts []Option) config {
	cfg := config{maxRequest: 1 << 20, scope: scopeByAuthorization}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	return cfg
}

// scopeByAuthorization is the default scope: the call's authorization
// header, which the guard hashes so that its secret is not in the key.
func scopeByAuthorization(ctx context.Context) string {
	if vs := metadata.ValueFromIncomingContext(ctx, "authorization"); len(vs) > 0 {
		return vs[0]
	}
	return ""
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
// each other's answers. Default: the call's authorization header (hashed).
// It panics if fn is nil.
func Scope(fn func(ctx context.Context) string) Option {
	if fn == nil {
		panic("grpcidempotency: Scope(nil): use SharedKeys for one namespace")
	}
	return optionFunc(func(c *config) { c.scope = fn })
}

// SharedKeys puts every caller's keys in one namespace: a caller that
// reuses another's key gets its answer. For services whose callers are
// one trusted party. Default: keys scoped per caller (see [Scope]).
func SharedKeys() Option {
	return optionFunc(func(c *config) { c.scope = func(context.Context) string { return "" } })
}

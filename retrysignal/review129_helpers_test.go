package retrysignal_test

import (
	"context"
	"io"
)

type r129bodyKey struct{}

func withBody(ctx context.Context, r io.Reader) context.Context {
	return context.WithValue(ctx, r129bodyKey{}, r)
}
func bodyFrom(ctx context.Context) io.Reader { return ctx.Value(r129bodyKey{}).(io.Reader) }

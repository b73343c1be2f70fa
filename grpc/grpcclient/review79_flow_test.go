package grpcclient_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
)

// A bidi stream with a concurrent reader, ~200 KiB sent (under the
// replay buffer), the first attempt failing before it read anything: the
// replay must not deadlock against the echoes nobody can read meanwhile.
func TestReview79ReplayLargerThanWindow(t *testing.T) {
	for _, withFault := range []bool{false, true} {
		srv := start(t)
		_, cc := dial(t, srv, grpcclient.WithPipeline(fastPipeline()))
		if withFault {
			srv.SetFault(grpctest.Chat, grpctest.Fault{Code: codes.Unavailable, Calls: 1, Delay: 100 * time.Millisecond})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := cc.NewStream(ctx, grpctest.ChatDesc, grpctest.Chat)
		require.NoError(t, err)
		got := make(chan int, 1)
		go func() {
			n := 0
			for {
				if err := st.RecvMsg(new(wrapperspb.StringValue)); err != nil {
					if err != io.EOF {
						t.Logf("recv: %v", err)
					}
					got <- n
					return
				}
				n++
			}
		}()
		msg := strings.Repeat("x", 10<<10)
		start := time.Now()
		for range 25 {
			require.NoError(t, st.SendMsg(wrapperspb.String(msg)))
		}
		require.NoError(t, st.CloseSend())
		n := <-got
		cancel()
		t.Logf("fault=%v: %d echoes in %v, server calls %d", withFault, n, time.Since(start), srv.Count(grpctest.Chat))
		require.Equal(t, 25, n, "fault=%v", withFault)
	}
}

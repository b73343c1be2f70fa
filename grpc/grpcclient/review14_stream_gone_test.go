package grpcclient_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// A committed bidi stream whose server goes away while the caller keeps
// sending (small messages, and large ones blocked by flow control): the
// dependency's failure must still count.
func TestReview14CommittedStreamServerGoneCounts(t *testing.T) {
	for _, big := range []bool{false, true} {
		t.Run(map[bool]string{false: "small", true: "flow-control-blocked"}[big], func(t *testing.T) {
			srv, err := grpctest.Start()
			require.NoError(t, err)
			b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Minute))
			_, cc := dial(t, srv, grpcclient.WithPipeline(fastPipeline(pipeline.WithBreaker(b))), grpcclient.MaxReplayBuffer(1<<30))
			st, err := cc.NewStream(t.Context(), grpctest.ChatDesc, grpctest.Chat)
			require.NoError(t, err)
			require.NoError(t, st.SendMsg(wrapperspb.String("a")))
			got := new(wrapperspb.StringValue)
			require.NoError(t, st.RecvMsg(got)) // committed
			msg := "m"
			if big {
				msg = strings.Repeat("x", 1<<20)
			}
			sendErr := make(chan error, 1)
			go func() {
				for {
					if err := st.SendMsg(wrapperspb.String(msg)); err != nil {
						sendErr <- err
						return
					}
				}
			}()
			time.Sleep(50 * time.Millisecond)
			srv.Close()
			serr := <-sendErr
			var rerr error
			for rerr == nil {
				rerr = st.RecvMsg(new(wrapperspb.StringValue))
			}
			t.Logf("SendMsg: %v; RecvMsg: %v", serr, rerr)
			assert.Equal(t, codes.Unavailable, status.Code(rerr))
			require.Eventually(t, func() bool { return b.State() == resilience.StateOpen }, time.Second, 5*time.Millisecond, "the server's failure counted")
		})
	}
}

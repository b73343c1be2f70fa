package redistest

import (
	"fmt"
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// A port taken between its finding and the server's bind (here by a
// listener of the test's own, which answers a dial) is no server: launch
// sees that its process exits, and Start would try other ports.
func TestLaunchOnATakenPortFails(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	Start(t) // skips without redis-server
	s := &Server{t: t, dir: t.TempDir(), addr: l.Addr().String()}
	err = s.launch()
	require.ErrorContains(t, err, "exited")
	require.ErrorContains(t, err, "Address already in use")
	require.Nil(t, s.cmd)
}

// A cluster node's bus port is port+10000, which must be free too.
func TestFreePortForAClusterNode(t *testing.T) {
	for range 20 {
		addr := freePort(t, true)
		_, port, _ := net.SplitHostPort(addr)
		p, err := strconv.Atoi(port)
		require.NoError(t, err)
		require.LessOrEqual(t, p+10000, 65535, addr)
		b, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+10000))
		require.NoError(t, err)
		b.Close()
	}
}

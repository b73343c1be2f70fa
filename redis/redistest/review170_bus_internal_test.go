package redistest

import (
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"
)

// review170: a cluster node whose bus port (port+10000) was taken since
// it was found free exits, and the changelog says it is started again on
// other ports. But Redis listens on its main port in initServer before
// clusterInit loads or writes nodes.conf and binds the bus: launch may
// see the main port listen and report ready for a node that then exits.
// Counted over 20 launches with the bus port held.
func TestReview170ClusterBusTakenReportedReady(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 20 servers")
	}
	dead := 0
	for i := range 20 {
		s := &Server{t: t, dir: t.TempDir(), args: []string{"--cluster-enabled", "yes"}}
		s.addr = freePort(t, true)
		_, port, _ := net.SplitHostPort(s.addr)
		var p int
		fmt.Sscan(port, &p)
		bus, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+10000))
		if err != nil {
			t.Logf("launch %d: bus port not free", i)
			continue
		}
		err = s.launch()
		if err != nil {
			t.Logf("launch %d: exit seen: %.80s", i, err)
		}
		if err == nil {
			time.Sleep(100 * time.Millisecond)
			var ws syscall.WaitStatus
			if pid, _ := syscall.Wait4(s.cmd.Process.Pid, &ws, syscall.WNOHANG, nil); pid == s.cmd.Process.Pid {
				dead++
				t.Logf("launch %d: reported ready, then the node exited (status %d)", i, ws.ExitStatus())
				_ = s.cmd.Process.Release()
				s.cmd = nil
			} else {
				s.Kill()
				t.Logf("launch %d: a node runs with its bus port held by another?", i)
			}
		}
		bus.Close()
	}
	if dead > 0 {
		t.Errorf("%d of 20 launches reported ready a cluster node that exited at once (its bus port taken)", dead)
	}
}

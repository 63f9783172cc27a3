//go:build e2e

// Package crosssubnet is the cross-subnet suite: a dual-stack cluster of
// namespaces (package cluster) whose node-c sits on another subnet, behind
// a router. node-a and node-b share the switch and route to each other
// directly. The suite runs each mode of --cross-subnet in turn, restarting
// every vmlaned (useMode): bgp, where every node peers with Debian's bird2
// on the router, which routes the pod subnets it learns; and vxlan, where
// the router knows no pod subnet and node-c is reached through vmlane's
// VXLAN device. `make e2e` runs it (`make e2e-cross` alone).
package crosssubnet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmlane/vmlane/e2e/cluster"
)

var (
	c *cluster.Cluster
	// suite is the runner the cluster was built with: daemons that the
	// tests restart are registered with it, so that they outlive the test.
	suite *cluster.Runner
	// mode is the --cross-subnet mode the daemons run in now.
	mode = "vxlan"
	// a1 is a plain pod on node-a, b1 one on node-b, c1 one on node-c,
	// and cv a VM pod on node-c.
	a1, b1, c1, cv *cluster.Pod
)

func TestMain(m *testing.M) {
	os.Exit(cluster.SuiteMain(m, "e2e-cross", setup))
}

func setup(r *cluster.Runner) {
	suite = r
	nodes := cluster.DefaultNodes(3)
	nodes[2] = cluster.FarNode(nodes[2])
	manifests, err := filepath.Abs("../../manifests")
	if err != nil {
		r.Fatal(err)
	}
	c = cluster.New(r, cluster.Options{BinDir: r.Env("VMLANE_BIN_DIR"), Manifests: manifests, Nodes: nodes, Log: os.Stderr,
		VMTimeout: 30 * time.Minute, DaemonArgs: []string{"--cross-subnet", "vxlan"}})
	a1 = c.Node("node-a").AddPod(r, "a1")
	b1 = c.Node("node-b").AddPod(r, "b1")
	c1 = c.Node("node-c").AddPod(r, "c1")
	cv = c.Node("node-c").AddVMPod(r, "cv")
	cv.WaitVM(r)
	for _, n := range c.Nodes {
		cluster.Eventually(r, n.Name+" ready with routes to the other nodes", func() (bool, string) {
			ready, why := n.Ready()
			routes, routes6 := n.Routes(), n.Routes6()
			n6 := len(strings.Split(strings.TrimSpace(routes6), "\n"))
			return ready && n.RouteCount() == len(c.Nodes)-1 && n6 == len(c.Nodes)-1, why + "\n" + routes + "\n" + routes6
		})
	}
}

// useMode restarts every node's vmlaned with --cross-subnet=m, and extra
// flags per node, unless they run in m already, and waits for each to be
// ready.
func useMode(t *testing.T, m string, extra map[string][]string) {
	t.Helper()
	if mode == m {
		return
	}
	for _, n := range c.Nodes {
		n.Daemon().Kill()
		n.ExtraArgs = append([]string{"--cross-subnet", m}, extra[n.Name]...)
		n.StartDaemon(suite)
	}
	for _, n := range c.Nodes {
		cluster.Eventually(t, n.Name+"'s vmlaned ready in "+m+" mode", n.Ready)
	}
	mode = m
}

// reachEachOther checks that every pod of ps pings every other, IPv4 and
// IPv6, and that for each pair of pairs the receiver's whoami sees the
// sender's own pod IP (no NAT).
func reachEachOther(t *testing.T, ps []*cluster.Pod, pairs [][2]*cluster.Pod) {
	t.Helper()
	for _, m := range []*cluster.Matrix{cluster.PingMatrix(ctx(t), ps, 3), cluster.PingMatrix6(ctx(t), ps, 3)} {
		var sb strings.Builder
		m.Write(&sb)
		t.Logf("ping matrix:\n%s", sb.String())
		for _, f := range m.Failures() {
			t.Error(f)
		}
	}
	for _, pair := range pairs {
		src, dst := pair[0], pair[1]
		if seen, err := src.WhoAmI(ctx(t), dst.IP); err != nil || seen != src.IP.String() {
			t.Errorf("%s → %s: seen as %q (%v), want %s", src.Name, dst.Name, seen, err, src.IP)
		}
	}
}

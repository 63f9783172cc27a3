//go:build e2e

package e2e

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmlane/vmlane/e2e/cluster"
)

// The cluster every test shares: booting a control plane and QEMU guests
// takes most of a minute on two cores, so it is built once, in TestMain,
// and the tests run in file order against it. Tests that change the
// cluster (a node deleted, a daemon killed) put it back before they end.
var (
	c *cluster.Cluster
	// The nodes are dual-stack (cluster.DefaultNodes): every pod has an
	// IPv4 and an IPv6 address.
	// vms are the VM pods: a1 and a2 on node-a, b1 and b2 on node-b.
	vms = map[string]*cluster.Pod{}
	// plain is the plain (container) pod on node-c.
	plain *cluster.Pod
)

// nodeB's podCIDR is small, so that the address-reuse test can use up
// every address of it through the CNI plugin.
var nodeBCIDR = netip.MustParsePrefix("10.244.1.0/28")

func TestMain(m *testing.M) {
	os.Exit(cluster.SuiteMain(m, "e2e", setup))
}

func setup(r *cluster.Runner) {
	bin := os.Getenv("VMLANE_BIN_DIR")
	if bin == "" {
		r.Fatal("VMLANE_BIN_DIR is not set: `make test` sets it to the folder `make build` fills")
	}
	nodes := cluster.DefaultNodes(3)
	nodes[1].PodCIDR = nodeBCIDR
	manifests, err := filepath.Abs("../manifests")
	if err != nil {
		r.Fatal(err)
	}
	c = cluster.New(r, cluster.Options{BinDir: bin, Manifests: manifests, Nodes: nodes, Log: os.Stderr, VMTimeout: 30 * time.Minute})
	for _, name := range []string{"a1", "a2", "b1", "b2"} {
		vms[name] = c.Node("node-"+name[:1]).AddVMPod(r, name)
	}
	plain = c.Node("node-c").AddPod(r, "c1")
	for _, p := range vms {
		p.WaitVM(r)
	}
	for _, n := range c.Nodes {
		cluster.Eventually(r, n.Name+" ready with routes to the other nodes", func() (bool, string) {
			ready, why := n.Ready()
			routes, routes6 := n.Routes(), n.Routes6()
			n6 := len(strings.Fields(strings.ReplaceAll(routes6, " ", "_"))) // one a line
			return ready && n.RouteCount() == len(c.Nodes)-1 && n6 == len(c.Nodes)-1, why + "\n" + routes + "\n" + routes6
		})
	}
}

// pods returns the named pods, VMs or the plain one.
func pods(names ...string) []*cluster.Pod {
	var ps []*cluster.Pod
	for _, n := range names {
		if n == "c1" {
			ps = append(ps, plain)
		} else {
			ps = append(ps, vms[n])
		}
	}
	return ps
}

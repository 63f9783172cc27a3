//go:build e2e

// Package hybrid is the hybrid real-node suite: a cluster whose own CNI is
// flannel (VXLAN, --kube-subnet-mgr) on two nodes, with vmlane's
// routes-only DaemonSet beside it, and two VM nodes labelled
// vmlane.io/vm-node=true: one running vmlane's full DaemonSet and
// kube-proxy, and a stand-in for a Mac, which runs no kube-proxy and whose
// vmlaned the node runs itself with --route-services. `make e2e` runs it;
// it needs what the real-node suite needs and flanneld (`make flannel`).
package hybrid

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vmlane/vmlane/e2e/cluster"
)

var (
	c *cluster.Cluster
	// flannelBefore is each flannel node's own state before vmlane came.
	flannelBefore = map[string]string{}
	web           = map[string][]cluster.KubePod{} // by node
	vms           = map[string]cluster.KubePod{}   // by pod name
)

var (
	flannelNodes = []string{"flannel-a", "flannel-b"}
	vmNodes      = []string{"vm-node", "mac-node"}
)

func TestMain(m *testing.M) {
	os.Exit(cluster.SuiteMain(m, "e2e-hybrid", setup))
}

func setup(r *cluster.Runner) {
	images := r.Env("VMLANE_IMAGE_DIR")
	overlay, err := filepath.Abs("../overlay-hybrid")
	if err != nil {
		r.Fatal(err)
	}
	vm := []string{"vmlane.io/vm-node=true"}
	c = cluster.NewReal(r, cluster.Options{
		Overlay:      overlay,
		DeferOverlay: true,
		Images:       []string{filepath.Join(images, "vmlane.tar"), filepath.Join(images, "pause.tar"), filepath.Join(images, "busybox.tar")},
		CNIBinDir:    r.Env("VMLANE_CNI_PLUGINS_DIR"),
		BinDir:       r.Env("VMLANE_BIN_DIR"),
		FlannelDir:   r.Env("VMLANE_FLANNEL_DIR"),
		Log:          os.Stderr,
		RealNodes: []cluster.RealNodeSpec{
			{Name: "flannel-a", IP: netip.MustParseAddr("10.99.0.11"), Runtime: cluster.Containerd, Flannel: true},
			{Name: "flannel-b", IP: netip.MustParseAddr("10.99.0.12"), Runtime: cluster.Containerd, Flannel: true},
			{Name: "vm-node", IP: netip.MustParseAddr("10.99.0.13"), Runtime: cluster.Containerd, Labels: vm},
			{Name: "mac-node", IP: netip.MustParseAddr("10.99.0.14"), Runtime: cluster.Containerd, MacStandIn: true,
				Labels: append(vm, "e2e.vmlane.io/mac-stand-in=true")},
		},
	})
	// flannel alone first: its nodes Ready, and what it made on them.
	cluster.WaitFor(r, 3*time.Minute, "flannel nodes Ready", func() (bool, string) { return nodesReady(flannelNodes...) })
	for _, n := range flannelNodes {
		flannelBefore[n] = flannelState(r, c.RealNode(n))
	}
	c.ApplyOverlay(r)
	cluster.WaitFor(r, 3*time.Minute, "vmlane DaemonSets ready", func() (bool, string) {
		if ok, why := c.PodsReady("vmlane-system", "app.kubernetes.io/name=vmlane-routes", len(flannelNodes)); !ok {
			return false, why
		}
		return c.PodsReady("vmlane-system", "app.kubernetes.io/name=vmlane", 1)
	})
	cluster.WaitFor(r, 2*time.Minute, "nodes Ready", c.NodesReady)
	web = deployWeb(r)
	// Each VM pings a flannel pod from inside its guest once it has its
	// address.
	for i, name := range []string{"vm-1", "vm-2"} {
		vms[name] = c.StartVMPod(r, name, vmNodes[i], []netip.Addr{web[flannelNodes[i]][0].IP})
	}
	for name := range vms {
		c.WaitGuest(r, name)
	}
}

//go:build e2e

// Package realnode is the e2e suite on real nodes: containerd, the kubelet
// and kube-proxy on every node, vmlane installed only by `kubectl apply -k`
// of the manifests (through e2e/overlay, which swaps in the image `make
// image` built), and pods made with kubectl. It runs with `make e2e`
// after the namespace suite (package e2e); docs/e2e.md says what each test shows.
package realnode

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/vmlane/vmlane/e2e/cluster"
)

// The cluster every test shares, built once in TestMain: three nodes,
// node-a and node-b on containerd 2.x, node-c on Debian's containerd 1.6.
var (
	c *cluster.Cluster
	// web are the plain pods (Deployment web, two per node) by node.
	web = map[string][]cluster.KubePod{}
	// vms are the VM pods by name: vm-a on node-a, vm-b on node-b.
	vms = map[string]cluster.KubePod{}
)

func TestMain(m *testing.M) {
	os.Exit(cluster.SuiteMain(m, "e2e-realnode", setup))
}

func setup(r *cluster.Runner) {
	images := r.Env("VMLANE_IMAGE_DIR")
	overlay, err := filepath.Abs("../overlay")
	if err != nil {
		r.Fatal(err)
	}
	c = cluster.NewReal(r, cluster.Options{
		Overlay: overlay,
		Images: append([]string{filepath.Join(images, "vmlane.tar"), filepath.Join(images, "pause.tar"), filepath.Join(images, "busybox.tar")},
			conformanceImages()...),
		CNIBinDir: r.Env("VMLANE_CNI_PLUGINS_DIR"),
		BinDir:    r.Env("VMLANE_BIN_DIR"),
		// The cluster DNS, as every user's cluster has.
		CoreDNSDir: r.Env("VMLANE_COREDNS_DIR"),
		Log:        os.Stderr,
		RealNodes: []cluster.RealNodeSpec{
			// Dual-stack: the controller manager gives each node an
			// IPv4 and an IPv6 podCIDR.
			{Name: "node-a", IP: netip.MustParseAddr("10.99.0.11"), IP6: netip.MustParseAddr("fd99::11"), Runtime: cluster.Containerd},
			{Name: "node-b", IP: netip.MustParseAddr("10.99.0.12"), IP6: netip.MustParseAddr("fd99::12"), Runtime: cluster.Containerd},
			{Name: "node-c", IP: netip.MustParseAddr("10.99.0.13"), IP6: netip.MustParseAddr("fd99::13"), Runtime: cluster.Containerd16},
		},
	})
	c.WaitNetwork(r)
	c.WaitClusterDNS(r)
	web = c.DeployWeb(r)
	// vm-b first: vm-a pings it as soon as it has its own address.
	vms["vm-b"] = c.StartVMPod(r, "vm-b", "node-b", cluster.VMGuest{})
	vms["vm-a"] = c.StartVMPod(r, "vm-a", "node-a", cluster.VMGuest{Ping: []netip.Addr{vms["vm-b"].IP}})
	for _, name := range []string{"vm-a", "vm-b"} {
		c.WaitGuest(r, name)
	}
}

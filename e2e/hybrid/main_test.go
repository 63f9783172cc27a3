//go:build e2e

// Package hybrid is the hybrid real-node suite: a dual-stack cluster whose
// own CNI is flannel (VXLAN, --kube-subnet-mgr, IPv6 enabled) on two
// nodes, with vmlane's
// routes-only DaemonSet beside it, and two VM nodes labelled
// vmlane.io/vm-node=true: one running vmlane's full DaemonSet and
// kube-proxy, and a stand-in for a Mac, which runs no kube-proxy and whose
// vmlaned the node runs itself with --route-services (cluster.NewHybrid,
// which `make demo-hybrid` builds too). `make e2e` runs it; it needs what
// the real-node suite needs and flanneld (`make flannel`).
package hybrid

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/vmlane/vmlane/e2e/cluster"
)

var h *cluster.Hybrid

var (
	flannelNodes = cluster.HybridFlannelNodes
	vmNodes      = cluster.HybridVMNodes
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
	h = cluster.NewHybrid(r, cluster.Options{
		Overlay:    overlay,
		Images:     []string{filepath.Join(images, "vmlane.tar"), filepath.Join(images, "pause.tar"), filepath.Join(images, "busybox.tar")},
		CNIBinDir:  r.Env("VMLANE_CNI_PLUGINS_DIR"),
		BinDir:     r.Env("VMLANE_BIN_DIR"),
		FlannelDir: r.Env("VMLANE_FLANNEL_DIR"),
		Log:        os.Stderr,
	})
}

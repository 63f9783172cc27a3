// Package controlplane runs a real Kubernetes control plane, etcd and
// kube-apiserver, for integration tests of the daemon's route controller:
// its informers, watches and updates talk to the apiserver they will meet in
// a cluster, not to a fake clientset.
//
// The binaries are built from source through the Go module proxy by
// build.sh (`make controlplane`) into a cache directory that the
// VMLANE_CONTROLPLANE_DIR environment variable names. Each [Start] gets its
// own network namespace (made by internal/testing/netnstest), with etcd and the apiserver
// inside, so tests running at once never share ports and nothing listens on
// the host. A test reaches the apiserver either through [ControlPlane.Dial],
// which opens connections from inside that namespace, or, with
// [Options.SwitchNS], over a veth on a test bridge, as a node would.
//
// Starting needs root and Linux; elsewhere [Start] skips. The package does
// not import client-go: [ControlPlane.Client] hands out what a rest.Config
// needs.
package controlplane

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// EnvDir names the environment variable that points at build.sh's output
// directory (build.sh --print-dir CACHE_DIR). The Makefile exports it.
const EnvDir = "VMLANE_CONTROLPLANE_DIR"

// ErrNotBuilt is returned (wrapped) by [Find] when the binaries have not been
// built. [Start] skips on it unless privileged tests are required.
var ErrNotBuilt = errors.New("control plane binaries not built")

// Binaries are the paths of a built control plane.
type Binaries struct {
	APIServer string
	Etcd      string
	// Built with them (build.sh recipe 3), for clusters with real nodes:
	// the controllers, the node agents and the client.
	ControllerManager string
	Scheduler         string
	Kubelet           string
	KubeProxy         string
	Kubectl           string
}

// Find locates the binaries that build.sh put in $VMLANE_CONTROLPLANE_DIR.
// It wraps [ErrNotBuilt], with a message saying how to build them, when the
// variable is unset or the build is missing or incomplete.
func Find() (Binaries, error) {
	dir := os.Getenv(EnvDir)
	if dir == "" {
		return Binaries{}, fmt.Errorf("%w: %s is not set; run `make controlplane` and export %s=$(bash internal/testing/controlplane/build.sh --print-dir .cache/controlplane)",
			ErrNotBuilt, EnvDir, EnvDir)
	}
	return FindIn(dir)
}

// FindIn is [Find] for an explicit build directory.
func FindIn(dir string) (Binaries, error) {
	b := Binaries{
		APIServer:         filepath.Join(dir, "kube-apiserver"),
		Etcd:              filepath.Join(dir, "etcd"),
		ControllerManager: filepath.Join(dir, "kube-controller-manager"),
		Scheduler:         filepath.Join(dir, "kube-scheduler"),
		Kubelet:           filepath.Join(dir, "kubelet"),
		KubeProxy:         filepath.Join(dir, "kube-proxy"),
		Kubectl:           filepath.Join(dir, "kubectl"),
	}
	// build.sh writes .stamp last: without it the build is partial.
	for _, path := range []string{filepath.Join(dir, ".stamp"), b.APIServer, b.Etcd, b.ControllerManager, b.Scheduler, b.Kubelet, b.KubeProxy, b.Kubectl} {
		if _, err := os.Stat(path); err != nil {
			return Binaries{}, fmt.Errorf("%w: %s=%s has no %s; run `make controlplane`: %w",
				ErrNotBuilt, EnvDir, dir, filepath.Base(path), err)
		}
	}
	return b, nil
}

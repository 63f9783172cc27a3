package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Options shape a control plane. The zero value gives one that listens on
// its namespace's loopback only.
type Options struct {
	// Addr, with SwitchNS, is the apiserver's address on a veth whose other
	// end is enslaved to SwitchBridge in the network namespace SwitchNS, so
	// that nodes (namespaces or VMs on that bridge) reach it as they would
	// a real one, at https://Addr:6443. The bridge and its namespace belong
	// to the caller. Without SwitchNS, Addr must be unset.
	Addr netip.Prefix
	// SwitchNS names (as `ip netns` does) the namespace holding the bridge.
	SwitchNS string
	// SwitchBridge is the name of the bridge in SwitchNS.
	SwitchBridge string
	// APIServerArgs are extra kube-apiserver flags, after (so overriding)
	// the ones Start passes, for example "--feature-gates=...".
	APIServerArgs []string
	// StartTimeout bounds each wait for etcd or the apiserver to become
	// ready; zero means DefaultStartTimeout.
	StartTimeout time.Duration
	// ClusterCIDR, when set, also starts kube-controller-manager, which
	// allocates each Node a /24 podCIDR from it (node IPAM, as kubeadm's
	// --pod-network-cidr does), and kube-scheduler: what a cluster with
	// real kubelets needs. Without it there are no controllers, and tests
	// write Node objects themselves.
	ClusterCIDR netip.Prefix
	// ClusterCIDR6, with ClusterCIDR, makes the cluster dual-stack: each
	// Node also gets a /64 of it (kube-controller-manager's
	// --node-cidr-mask-size-ipv6).
	ClusterCIDR6 netip.Prefix
}

// validate reports misuse of the switch options.
func (o Options) validate() error {
	switch {
	case o.SwitchNS == "" && o.Addr.IsValid():
		return errors.New("Options.Addr needs Options.SwitchNS")
	case o.SwitchNS != "" && (!o.Addr.IsValid() || !o.Addr.Addr().Is4()):
		return fmt.Errorf("Options.SwitchNS %s needs an IPv4 Options.Addr, have %v", o.SwitchNS, o.Addr)
	case o.SwitchNS != "" && o.SwitchBridge == "":
		return fmt.Errorf("Options.SwitchNS %s needs Options.SwitchBridge", o.SwitchNS)
	case o.ClusterCIDR.IsValid() && (!o.ClusterCIDR.Addr().Is4() || o.ClusterCIDR.Bits() > 22 || o.ClusterCIDR != o.ClusterCIDR.Masked()):
		return fmt.Errorf("Options.ClusterCIDR %s: want an IPv4 network of /22 or larger (nodes get /24s)", o.ClusterCIDR)
	case o.ClusterCIDR6.IsValid() && (!o.ClusterCIDR.IsValid() || !o.ClusterCIDR6.Addr().Is6() || o.ClusterCIDR6.Bits() > 62 || o.ClusterCIDR6.Bits() < 48 || o.ClusterCIDR6 != o.ClusterCIDR6.Masked()):
		return fmt.Errorf("Options.ClusterCIDR6 %s: want an IPv6 network of /48 to /62 (nodes get /64s) beside an IPv4 ClusterCIDR", o.ClusterCIDR6)
	}
	return nil
}

// DefaultStartTimeout is how long Start waits for /readyz. The apiserver
// takes a few seconds on an idle machine, but `go test ./...` runs other
// packages' tests beside it on two cores.
const DefaultStartTimeout = 90 * time.Second

// Ports inside the control plane's own namespace, where nothing else
// listens, so fixed ports are always free and stay the same across an
// apiserver restart.
const (
	etcdClientPort = 2379
	etcdPeerPort   = 2380
	// APIServerPort is the apiserver's secure port.
	APIServerPort = 6443
	// The controllers' secure ports, for their /healthz.
	controllerManagerPort = 10257
	schedulerPort         = 10259
)

// stopGrace is how long a SIGTERM'd server gets before SIGKILL. The
// apiserver drains in well under a second with its default
// --shutdown-delay-duration of 0.
const stopGrace = 10 * time.Second

// ServiceCIDR is the apiserver's --service-cluster-ip-range.
const ServiceCIDR = "10.96.0.0/16"

// ControlPlane is a running etcd and kube-apiserver in their own network
// namespace. Everything is stopped and the namespace deleted when the test
// that started it ends.
type ControlPlane struct {
	// URL is the apiserver's base URL, https://127.0.0.1:6443 or
	// https://Options.Addr:6443. It is reachable from inside NetNS (see
	// Dial) and, with a switch, from the switch's bridge.
	URL string
	// Kubeconfig is the path of a kubeconfig file for URL with the admin
	// token and the CA. It works where URL is reachable: for a
	// loopback-only control plane, inside NetNS (`ip netns exec NetNS
	// kubectl --kubeconfig ...`).
	Kubeconfig string
	// NetNS is the name of the control plane's network namespace.
	NetNS string
	// Token is a bearer token for a member of system:masters, so every
	// request is authorized (--authorization-mode=RBAC).
	Token string
	// CACert is the PEM CA that signed the apiserver's serving certificate.
	CACert []byte
	// LogDir holds etcd.log and kube-apiserver.log (appended to across
	// restarts). Their tails are logged when the test fails.
	LogDir string

	t       testing.TB
	bins    Binaries
	dir     string
	nsPath  string
	host    netip.Addr
	args    []string // extra apiserver flags
	timeout time.Duration

	clusterCIDR  netip.Prefix
	clusterCIDR6 netip.Prefix

	mu          sync.Mutex
	etcd        *proc   // guarded by mu
	apiserver   *proc   // guarded by mu
	controllers []*proc // guarded by mu: kube-controller-manager, kube-scheduler
}

// ClientConfig is what a client-go rest.Config needs, without this package
// importing client-go:
//
//	cc := cp.Client()
//	cfg := &rest.Config{
//		Host:            cc.Host,
//		BearerToken:     cc.BearerToken,
//		TLSClientConfig: rest.TLSClientConfig{CAData: cc.CAData},
//		Dial:            cc.Dial,
//	}
type ClientConfig struct {
	Host        string
	BearerToken string
	CAData      []byte
	// Dial opens connections from inside the control plane's namespace
	// (see ControlPlane.Dial). With a switch the test's own namespace may
	// reach the apiserver directly, but Dial works either way.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Client returns the connection details for a client of the apiserver.
func (cp *ControlPlane) Client() ClientConfig {
	return ClientConfig{Host: cp.URL, BearerToken: cp.Token, CAData: cp.CACert, Dial: cp.Dial}
}

// Tail returns the last n lines of the file at path, for failure
// messages (the error itself when it cannot be read).
func Tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// proc is a started server.
type proc struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has been waited for
	err     error         // Wait's result, set before done is closed
}

// stop sends SIGTERM, then SIGKILL after stopGrace, and waits. A nil p is
// already stopped.
func (p *proc) stop() {
	if p == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		p.cmd.Process.Kill()
		<-p.done
	}
}

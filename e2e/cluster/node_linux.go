package cluster

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmlane/vmlane/internal/testing/syncbuf"

	"github.com/containernetworking/cni/libcni"

	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/plugin"
)

// Node is one node: a network namespace on the switch running vmlaned,
// with its own folder for what a node keeps on disk (the lease file, the
// CNI configuration folder, libcni's cache).
type Node struct {
	NodeSpec
	NS  *netnstest.NS
	Dir string
	// ExtraArgs are more flags for this node's vmlaned, after the
	// cluster's DaemonArgs; StartDaemon reads them.
	ExtraArgs []string
	// Kubeconfig is the kubeconfig its vmlaned runs with: a token bound to
	// a pod on this node, as the DaemonSet's pods have.
	Kubeconfig string

	c      *Cluster
	cni    *libcni.CNIConfig
	daemon *Daemon
}

// AddNode creates s's Node object and namespace, starts vmlaned there and
// waits for its CNI configuration.
func (c *Cluster) AddNode(tb testing.TB, s NodeSpec) *Node {
	tb.Helper()
	c.step("node %s: podCIDRs %v, InternalIPs %s %s", s.Name, s.PodCIDRs(), s.IP, s.IP6)
	c.CreateNodeObject(tb, s)
	n := &Node{NodeSpec: s, c: c, Dir: filepath.Join(c.dir, s.Name), Kubeconfig: c.nodeKubeconfig(tb, s.Name)}
	bits, bits6 := SwitchSubnet.Bits(), SwitchSubnet6.Bits()
	if Far(s.IP) {
		bits, bits6 = FarSubnet.Bits(), FarSubnet6.Bits()
	}
	n.NS = c.host(tb, s.Name, netip.PrefixFrom(s.IP, bits), netip.PrefixFrom(s.IP6, bits6))
	if c.Router != nil {
		c.routeToFar(tb, n.NS, Far(s.IP))
	}
	if err := os.MkdirAll(n.Dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	n.cni = libcni.NewCNIConfigWithCacheDir([]string{c.Opts.BinDir}, filepath.Join(n.Dir, "cni-cache"), nil)
	c.Nodes = append(c.Nodes, n)
	n.StartDaemon(tb)
	Eventually(tb, "vmlaned on "+s.Name+" to write its CNI configuration", func() (bool, string) {
		_, err := os.Stat(n.ConfList(true))
		return err == nil, n.daemon.Logs()
	})
	return n
}

// LeaseFile is the node's lease file.
func (n *Node) LeaseFile() string { return filepath.Join(n.Dir, "leases.json") }

// ConfDir is the node's CNI configuration folder.
func (n *Node) ConfDir() string { return filepath.Join(n.Dir, "net.d") }

// ConfList is the conflist vmlaned wrote for VM pods (vm) or plain pods.
func (n *Node) ConfList(vm bool) string {
	if vm {
		return filepath.Join(n.ConfDir(), plugin.VMConflistName)
	}
	return filepath.Join(n.ConfDir(), plugin.ConflistName)
}

// DaemonArgs are the flags vmlaned runs with on n.
func (n *Node) DaemonArgs() []string {
	cluster := n.c.Opts.ClusterCIDR.String()
	if n.PodCIDR6.IsValid() {
		cluster += "," + n.c.Opts.ClusterCIDR6.String()
	}
	return append([]string{
		"--kubeconfig", n.Kubeconfig, "--node-name", n.Name,
		"--cluster-cidr", cluster,
		"--cni-conf-dir", n.ConfDir(), "--lease-file", n.LeaseFile(),
		"--dns", "10.96.0.10", "--search", "default.svc.cluster.local", "--domain", "cluster.local",
		"--resync-period", "10s",
		"--peer-key-file", n.c.peerKeyFile,
	}, slices.Concat(n.c.Opts.DaemonArgs, n.ExtraArgs)...)
}

// Daemon is a running vmlaned.
type Daemon struct {
	cmd    *exec.Cmd
	logs   *syncbuf.Buffer
	exited chan struct{}
}

// StartDaemon starts vmlaned on n. It is killed at the end of tb.
func (n *Node) StartDaemon(tb testing.TB) *Daemon {
	tb.Helper()
	cmd := n.NS.Command(filepath.Join(n.c.Opts.BinDir, "vmlaned"), n.DaemonArgs()...)
	d := &Daemon{cmd: cmd, logs: &syncbuf.Buffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = d.logs, d.logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("starting vmlaned on %s: %v", n.Name, err)
	}
	go func() { cmd.Wait(); close(d.exited) }()
	n.daemon = d
	tb.Cleanup(func() {
		d.kill()
		if tb.Failed() {
			tb.Logf("vmlaned on %s, log:\n%s", n.Name, d.Logs())
		}
	})
	return d
}

// Daemon returns the vmlaned last started on n.
func (n *Node) Daemon() *Daemon { return n.daemon }

// Kill sends SIGKILL and waits for the process to go.
func (d *Daemon) Kill() { d.kill() }

func (d *Daemon) kill() {
	d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.exited
}

// Logs returns what vmlaned wrote so far.
func (d *Daemon) Logs() string { return d.logs.String() }

// WaitLog waits until vmlaned has logged a line containing s.
func (d *Daemon) WaitLog(tb testing.TB, s string) {
	tb.Helper()
	Eventually(tb, "vmlaned to log "+s, func() (bool, string) {
		return strings.Contains(d.Logs(), s), d.Logs()
	})
}

// Ready reports whether the daemon's /readyz says ready: it has set up
// the node and its route controller has synced.
func (n *Node) Ready() (bool, string) {
	// Not wget -T: Debian 12's busybox-static crashes on it (busybox
	// bug, mirror/busybox#124); timeout(1) bounds the request instead.
	out, err := n.NS.Run("timeout", "5", "busybox", "wget", "-q", "-O", "-", "http://127.0.0.1:9465/readyz")
	return err == nil, out
}

// cniTimeout is how long one CNI call may take on a busy machine.
const cniTimeout = 2 * time.Minute

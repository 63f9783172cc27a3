package cluster

import (
	_ "embed"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vmlane/vmlane/internal/testing/controlplane"
	"github.com/vmlane/vmlane/internal/testing/netnstest"
)

//go:embed node-init.sh
var nodeInit []byte

// Runtime is a real node's container runtime.
type Runtime string

const (
	// Containerd is containerd 2.x, built by internal/testing/realnode/build.sh.
	Containerd Runtime = "containerd"
	// Containerd16 is Debian 12's containerd 1.6 package, whose libcni,
	// like containerd 1.7's (what most clusters still run), predates CNI
	// 1.1.
	Containerd16 Runtime = "containerd-1.6"
)

// RealNodeSpec is a real node: its name, its address on the switch and
// its container runtime. Its podCIDR comes from kube-controller-manager's
// node IPAM.
type RealNodeSpec struct {
	Name string
	// IP and IP6 are the node's addresses on the switch (IP6 zero on an
	// IPv4-only node); the kubelet reports both (--node-ip).
	IP      netip.Addr
	IP6     netip.Addr
	Runtime Runtime
	// Labels are the kubelet's --node-labels (key=value).
	Labels []string
	// Flannel makes the node one of the cluster's own CNI in a hybrid
	// cluster: flanneld (VXLAN, --kube-subnet-mgr, from Options.FlannelDir)
	// runs on it, and its pods get addresses from the reference bridge
	// and host-local plugins configured from flanneld's subnet.env, which
	// is what flannel's own CNI plugin delegates to.
	Flannel bool
	// MacStandIn makes the node a stand-in for a Mac VM node: no
	// kube-proxy, and vmlaned run by the node itself with a kubeconfig
	// (as launchd runs it on a Mac) with --route-services, not by the
	// DaemonSet; the vmlane plugin is installed from Options.BinDir.
	MacStandIn bool
}

// RealNode is a node as a user runs one: containerd, the kubelet and
// kube-proxy in the node's own network and mount namespaces. vmlane gets
// there only through the DaemonSet.
type RealNode struct {
	RealNodeSpec
	NS *netnstest.NS
	// Dir is the node's folder on the host: its disk (overlays, /run,
	// containerd's root) and the daemons' logs.
	Dir string

	c      *Cluster
	cgroup string // relative v1 cgroup path of everything the node runs
	cmd    *exec.Cmd
	exited chan struct{}
}

var realNodeSeq atomic.Int64

// RuntimeDir is where internal/testing/realnode/build.sh put containerd & co
// (`build.sh --print-dir`), from VMLANE_REALNODE_DIR.
func RuntimeDir() (string, error) {
	dir := os.Getenv("VMLANE_REALNODE_DIR")
	if dir == "" {
		return "", errors.New("VMLANE_REALNODE_DIR is not set: run `make realnode` and export VMLANE_REALNODE_DIR=$(bash internal/testing/realnode/build.sh --print-dir .cache/realnode)")
	}
	for _, f := range []string{".stamp", "containerd", "containerd-shim-runc-v2", "ctr", "containerd-1.6/containerd"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return "", fmt.Errorf("VMLANE_REALNODE_DIR=%s has no %s: run `make realnode`", dir, f)
		}
	}
	return dir, nil
}

// runtimeBin is the folder of spec's containerd, ctr and shim.
func (s RealNodeSpec) runtimeBin(dir string) string {
	if s.Runtime == Containerd16 {
		return filepath.Join(dir, "containerd-1.6")
	}
	return dir
}

// AddRealNode starts a real node on the switch and waits until its
// containerd is up with the images imported and its kubelet and kube-proxy
// are started; [Cluster.WaitNetwork] waits for the Node to turn Ready.
func (c *Cluster) AddRealNode(tb testing.TB, s RealNodeSpec) *RealNode {
	tb.Helper()
	if s.Runtime == "" {
		s.Runtime = Containerd
	}
	c.step("real node %s: %s, kubelet, kube-proxy at %s %s", s.Name, s.Runtime, s.IP, s.IP6)
	n := &RealNode{RealNodeSpec: s, c: c, exited: make(chan struct{})}
	n.NS = c.host(tb, s.Name, netip.PrefixFrom(s.IP, SwitchSubnet.Bits()), netip.PrefixFrom(s.IP6, SwitchSubnet6.Bits()))
	// A node has a default route: without one a pod's host-network
	// connection to the kubernetes Service (10.96.0.1) fails with
	// "network is unreachable" before kube-proxy's DNAT is consulted.
	n.NS.MustRun(tb, "ip", "route", "add", "default", "via", OutsideIP.String())
	if s.IP6.IsValid() {
		n.NS.MustRun(tb, "ip", "-6", "route", "add", "default", "via", OutsideIP6.String())
	}
	// Named as netnstest names its namespaces, so that a later run can
	// tell a killed run's leftovers from a live one's (netnstest.OwnerGone).
	id := fmt.Sprintf("%s%d-%d-%s", netnstest.Prefix, os.Getpid(), realNodeSeq.Add(1), s.Name)
	n.Dir = filepath.Join(os.TempDir(), "vmlane-e2e-nodes", id)
	base, err := ownMemoryCgroup()
	if err != nil {
		tb.Fatal(err)
	}
	n.cgroup = filepath.Join(base, id)
	// Cleanups run newest first: kill before the namespace goes (it was
	// registered above), remove the folder once nothing runs on it.
	tb.Cleanup(func() {
		if tb.Failed() {
			for _, f := range []string{"init.log", "containerd.log", "kubelet.log", "kube-proxy.log", "flanneld.log", "vmlaned.log"} {
				tb.Logf("node %s: tail of %s:\n%s", s.Name, f, controlplane.Tail(filepath.Join(n.Dir, f), 30))
			}
		}
		n.stop()
		os.RemoveAll(n.Dir)
	})
	if err := n.start(); err != nil {
		tb.Fatalf("node %s: %v\ninit.log:\n%s", s.Name, err, controlplane.Tail(filepath.Join(n.Dir, "init.log"), 30))
	}
	c.RealNodes = append(c.RealNodes, n)
	return n
}

// nodeIPs is the kubelet's --node-ip: IPv4, then IPv6 on a dual-stack
// node.
func (n *RealNode) nodeIPs() string {
	if n.IP6.IsValid() {
		return n.IP.String() + "," + n.IP6.String()
	}
	return n.IP.String()
}

// clusterCIDRs is kube-proxy's clusterCIDR: the pod networks of the
// node's families.
func (n *RealNode) clusterCIDRs() string {
	if n.IP6.IsValid() {
		return n.c.Opts.ClusterCIDR.String() + "," + n.c.Opts.ClusterCIDR6.String()
	}
	return n.c.Opts.ClusterCIDR.String()
}

func (n *RealNode) start() error {
	sweepRealNodes()
	rtDir, err := RuntimeDir()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(n.Dir, 0o755); err != nil {
		return err
	}
	if err := makeCgroups(n.cgroup, "daemons", "pods"); err != nil {
		return err
	}
	files := map[string][]byte{
		"node-init.sh":    nodeInit,
		"containerd.toml": []byte(containerdConfig(n.Runtime)),
		"kubelet.yaml":    []byte(kubeletConfig(n.IP, "/"+filepath.Join(n.cgroup, "pods"))),
		"kube-proxy.yaml": []byte(kubeProxyConfig(n.Name, n.clusterCIDRs())),
	}
	kc, err := os.ReadFile(n.c.CP.Kubeconfig)
	if err != nil {
		return err
	}
	files["kubeconfig"] = kc
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(n.Dir, name), data, 0o644); err != nil {
			return err
		}
	}
	logf, err := os.Create(filepath.Join(n.Dir, "init.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	n.cmd = exec.Command("nsenter", "--net="+n.NS.Path, "--",
		"unshare", "--mount", "--propagation", "private", "--", "sh", filepath.Join(n.Dir, "node-init.sh"))
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	var extra []string
	if len(n.Labels) > 0 {
		extra = append(extra, "NODE_LABELS="+strings.Join(n.Labels, ","))
	}
	if n.Flannel {
		if n.c.Opts.FlannelDir == "" {
			return errors.New("a flannel node needs Options.FlannelDir (make flannel; VMLANE_FLANNEL_DIR)")
		}
		extra = append(extra, "FLANNELD="+filepath.Join(n.c.Opts.FlannelDir, "flanneld"), "FLANNEL_NETWORK="+n.c.Opts.ClusterCIDR.String())
		if n.IP6.IsValid() {
			extra = append(extra, "FLANNEL_NETWORK6="+n.c.Opts.ClusterCIDR6.String())
		}
	}
	if n.MacStandIn {
		extra = append(extra, "NO_KUBE_PROXY=1", "VMLANE_BIN="+n.c.Opts.BinDir, "VMLANE_VM_CONF_DIR="+VMConfDir,
			"SERVICE_CIDR="+controlplane.ServiceCIDR)
	}
	n.cmd.Env = append(append(os.Environ(), extra...),
		"NODE_DIR="+n.Dir, "NODE_NAME="+n.Name, "NODE_IP="+n.nodeIPs(),
		"NODE_CGROUP="+filepath.Join(n.cgroup, "daemons"),
		"RUNTIME_BIN="+n.runtimeBin(rtDir), "CNI_BIN="+n.c.Opts.CNIBinDir,
		"KUBELET="+n.c.bins.Kubelet, "KUBE_PROXY="+n.c.bins.KubeProxy,
		"IMAGES="+strings.Join(n.c.Opts.Images, " "),
	)
	// The init shell dies with the test binary; what it started is
	// killed through the node's cgroup by stop, or by the next run's
	// sweep.
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.cmd.Start(); err != nil {
		return err
	}
	go func() { n.cmd.Wait(); close(n.exited) }()
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(n.Dir, "init.ready")); err == nil {
			return nil
		}
		select {
		case <-n.exited:
			return fmt.Errorf("node-init.sh exited: %v", n.cmd.ProcessState)
		default:
		}
		if time.Now().After(deadline) {
			return errors.New("containerd did not come up with the images imported within 3 minutes")
		}
	}
}

// DefaultRealNodes returns n containerd 2.x nodes, node-a, node-b, ...,
// at 10.99.0.<11+i>.
func DefaultRealNodes(n int) []RealNodeSpec {
	var ns []RealNodeSpec
	for _, s := range DefaultNodes(n) {
		ns = append(ns, RealNodeSpec{Name: s.Name, IP: s.IP, IP6: s.IP6, Runtime: Containerd})
	}
	return ns
}

// File is the host's path of a file on the node's own disk (/etc, /opt,
// /var/lib or /var/log, which are overlays whose upper folders the node
// writes), for reading what the node wrote; see Run to change it.
func (n *RealNode) File(path string) string {
	for _, ov := range []struct{ mount, dir string }{{"/etc/", "etc"}, {"/opt/", "opt"}, {"/var/lib/", "varlib"}, {"/var/log/", "varlog"}} {
		if rest, ok := strings.CutPrefix(path, ov.mount); ok {
			return filepath.Join(n.Dir, "ov", ov.dir, "up", rest)
		}
	}
	panic("RealNode.File: " + path + " is not on the node's own disk (/etc, /opt, /var/lib, /var/log)")
}

// Run runs argv on the node, in its network and mount namespaces, with
// stdin, and returns its combined output. Change the node's files this
// way, not through File: a write to an overlay's upper folder from outside
// is invisible to the node's file watchers (containerd's CNI config
// watch among them), and overlayfs does not promise to show it at all.
func (n *RealNode) Run(stdin string, argv ...string) (string, error) {
	cmd := exec.Command("nsenter", append([]string{"--target", strconv.Itoa(n.cmd.Process.Pid), "--mount", "--net", "--"}, argv...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s on %s: %w: %s", strings.Join(argv, " "), n.Name, err, out)
	}
	return string(out), nil
}

// Shell is the command that opens a shell on the node: its network and
// mount namespaces, as the node's own processes see them.
func (n *RealNode) Shell() string {
	return fmt.Sprintf("nsenter --net=%s --mount=/proc/%d/ns/mnt bash", n.NS.Path, n.cmd.Process.Pid)
}

// ContainerdSocket is the node's containerd socket as the host sees it.
func (n *RealNode) ContainerdSocket() string {
	return filepath.Join(n.Dir, "run", "containerd", "containerd.sock")
}

// Ctr runs the ctr of the node's containerd (runtimeBin) against its
// socket, in the k8s.io namespace the kubelet's images are in, and returns
// its combined output.
func (n *RealNode) Ctr(args ...string) (string, error) {
	dir, err := RuntimeDir()
	if err != nil {
		return "", err
	}
	argv := append([]string{"--address", n.ContainerdSocket(), "-n", "k8s.io"}, args...)
	out, err := exec.Command(filepath.Join(n.runtimeBin(dir), "ctr"), argv...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: ctr %s: %w: %s", n.Name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Log returns the tail of one of the node's logs: containerd.log,
// kubelet.log, kube-proxy.log or init.log.
func (n *RealNode) Log(name string, lines int) string {
	return controlplane.Tail(filepath.Join(n.Dir, name), lines)
}

// Pids are the processes the node runs whose command name (comm) is comm.
func (n *RealNode) Pids(comm string) []int {
	var out []int
	for _, pid := range cgroupPids(filepath.Join("/sys/fs/cgroup/memory", n.cgroup)) {
		if c, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(c)) == comm {
			out = append(out, pid)
		}
	}
	return out
}

// Signal sends sig to the node's processes named comm (Pids) and returns
// their pids; it is an error when there is none.
func (n *RealNode) Signal(comm string, sig syscall.Signal) ([]int, error) {
	pids := n.Pids(comm)
	if len(pids) == 0 {
		return nil, fmt.Errorf("node %s runs no %s", n.Name, comm)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, sig); err != nil {
			return pids, fmt.Errorf("signalling %s (pid %d) on %s: %w", comm, pid, n.Name, err)
		}
	}
	return pids, nil
}

// stop kills everything the node runs, its containers too, through its
// cgroup, and removes the cgroups. The mount namespace goes with its last
// process, and with it every mount the node made.
func (n *RealNode) stop() {
	if n.cmd != nil && n.cmd.Process != nil {
		n.cmd.Process.Kill()
		<-n.exited
	}
	killCgroup(n.cgroup)
}

// Routes returns n's vmlane routes as `ip route show proto 77` prints
// them.
func (n *RealNode) Routes() string {
	out, _ := n.NS.Run("ip", "route", "show", "proto", "77")
	return strings.TrimSpace(out)
}

// Routes6 returns n's IPv6 vmlane routes, one a line.
func (n *RealNode) Routes6() string {
	out, _ := n.NS.Run("ip", "-6", "route", "show", "proto", "77")
	return strings.TrimSpace(out)
}

var realSwept atomic.Bool

// sweepRealNodes kills and removes what real nodes of killed test runs
// left: their cgroups (with every process in them) and their folders.
// Only names this package made, whose pid is dead, are touched.
func sweepRealNodes() {
	if realSwept.Swap(true) {
		return
	}
	dead := netnstest.OwnerGone
	// Node cgroups sit a few levels down the memory hierarchy (under
	// the memory cgroup of the run that made them).
	root := "/sys/fs/cgroup/memory"
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if strings.Count(strings.TrimPrefix(p, root), "/") > 4 {
			return filepath.SkipDir
		}
		if dead(d.Name()) {
			killCgroup(strings.TrimPrefix(p, root+"/"))
			return filepath.SkipDir
		}
		return nil
	})
	dir := filepath.Join(os.TempDir(), "vmlane-e2e-nodes")
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if dead(e.Name()) {
			os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

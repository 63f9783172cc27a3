package cluster

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmlane/vmlane/internal/testing/controlplane"
	"github.com/vmlane/vmlane/internal/testing/privtest"
	"github.com/vmlane/vmlane/internal/testing/testvm"
)

// NewReal builds a cluster of real nodes, the path a user takes: a
// control plane with kube-controller-manager (node IPAM hands out the
// podCIDRs) and kube-scheduler, the manifests applied through the overlay
// that swaps in the image built here, and nodes running containerd, the
// kubelet and kube-proxy. vmlane reaches the nodes only as the DaemonSet:
// its install-cni puts the plugin into each node's /opt/cni/bin, and its
// vmlaned writes the conflists the node's containerd then uses.
//
// Nodes with an IPv6 address make the cluster dual-stack: the controller
// manager hands out IPv6 podCIDRs from ClusterCIDR6 too, and the kubelets
// report both addresses.
func NewReal(tb testing.TB, o Options) *Cluster {
	tb.Helper()
	c := newCluster(tb, o, "ip", "nsenter", "unshare", "runc", "qemu-system-x86_64")
	if _, err := RuntimeDir(); err != nil {
		privtest.Missing(tb, err.Error())
	}
	cp := controlplane.Options{ClusterCIDR: c.Opts.ClusterCIDR}
	if c.DualStack() {
		cp.ClusterCIDR6 = c.Opts.ClusterCIDR6
	}
	c.startControlPlane(tb, cp)
	if o.BinDir != "" {
		c.startControlPlaneRoutes(tb)
	}
	if !o.DeferOverlay {
		c.ApplyOverlay(tb)
	}
	if o.CoreDNSDir != "" {
		c.Opts.Images = append(c.Opts.Images, filepath.Join(o.CoreDNSDir, "coredns.tar"))
		c.deployCoreDNS(tb)
	}
	c.addOutside(tb, "the nodes' default gateway")
	for _, s := range o.RealNodes {
		c.AddRealNode(tb, s)
	}
	// Registered after the nodes, so it runs before they are stopped.
	tb.Cleanup(func() {
		if tb.Failed() {
			c.dumpPods(tb)
		}
	})
	return c
}

// ApplyOverlay makes the live-migration notices' key, as docs/install.md
// has a user of manifests/ make it (the Secret vmlane-peer, the cluster's
// random key), then applies the manifests through Options.Overlay.
func (c *Cluster) ApplyOverlay(tb testing.TB) {
	tb.Helper()
	c.step("the live-migration notices' key: the Secret vmlane-system/vmlane-peer")
	c.Apply(tb, "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: vmlane-system\n")
	if out, err := c.Kubectl("-n", "vmlane-system", "create", "secret", "generic", "vmlane-peer", "--from-file=key="+c.peerKeyFile); err != nil && !strings.Contains(out, "already exists") {
		tb.Fatalf("creating the Secret vmlane-peer: %v\n%s", err, out)
	}
	c.step("manifests: kubectl apply --server-side -k %s", c.Opts.Overlay)
	c.MustKubectl(tb, "apply", "--server-side", "-k", c.Opts.Overlay)
}

// dumpPods logs every pod and the tail of each vmlane pod's log: where a
// failed run's reason usually is.
func (c *Cluster) dumpPods(tb testing.TB) {
	out, _ := c.Kubectl("get", "pods", "-A", "-o", "wide")
	tb.Logf("kubectl get pods -A -o wide:\n%s", out)
	out, _ = c.Kubectl("get", "nodes", "-o", "wide")
	tb.Logf("kubectl get nodes -o wide:\n%s", out)
	for _, n := range c.RealNodes {
		// The kubelet's own log files, on the node's disk: they are
		// there even when the apiserver cannot reach the kubelet.
		logs, _ := filepath.Glob(n.File("/var/log/pods/vmlane-system_*/*/*.log"))
		for _, l := range logs {
			tb.Logf("%s: %s:\n%s", n.Name, strings.TrimPrefix(l, n.Dir), controlplane.Tail(l, 25))
		}
	}
}

// Guest is the QEMU test guest VM pods boot.
func (c *Cluster) Guest() testvm.Guest { return c.guest }

// RealNode returns the real node named name, nil if there is none.
func (c *Cluster) RealNode(name string) *RealNode {
	for _, n := range c.RealNodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// KubectlIn runs kubectl as admin with stdin.
func (c *Cluster) KubectlIn(stdin string, args ...string) (string, error) {
	return c.kubectl(c.CP.Kubeconfig, strings.NewReader(stdin), args...)
}

// Apply applies YAML objects with kubectl.
func (c *Cluster) Apply(tb testing.TB, yaml string) {
	tb.Helper()
	if _, err := c.KubectlIn(yaml, "apply", "-f", "-"); err != nil {
		tb.Fatal(err)
	}
}

// WaitFor polls cond every half second for up to d and fails tb with what
// cond saw last.
func WaitFor(tb testing.TB, d time.Duration, what string, cond func() (bool, string)) {
	tb.Helper()
	var last string
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		var ok bool
		if ok, last = cond(); ok {
			return
		}
	}
	tb.Fatalf("%s: not within %v; last seen:\n%s", what, d, last)
}

// NodesReady reports whether every real node's Node is Ready, and the
// Ready conditions as `kubectl get nodes` would summarise them.
func (c *Cluster) NodesReady() (bool, string) {
	nodes, err := c.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return false, err.Error()
	}
	var b strings.Builder
	ready := 0
	for _, n := range nodes.Items {
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				fmt.Fprintf(&b, "%s podCIDR=%s Ready=%s %s\n", n.Name, n.Spec.PodCIDR, cond.Status, cond.Message)
				if cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
	}
	return ready == len(c.RealNodes) && len(nodes.Items) == len(c.RealNodes), b.String()
}

// PodsReady reports whether want pods match selector in namespace ns and
// all are Ready, with a line per pod.
func (c *Cluster) PodsReady(ns, selector string, want int) (bool, string) {
	pods, err := c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return false, err.Error()
	}
	var b strings.Builder
	ready := 0
	for _, p := range pods.Items {
		ok := p.DeletionTimestamp == nil && podReady(&p)
		if ok {
			ready++
		}
		fmt.Fprintf(&b, "%s on %s ip=%s phase=%s ready=%v %s\n", p.Name, p.Spec.NodeName, p.Status.PodIP, p.Status.Phase, ok, waitingReason(&p))
	}
	return ready == want && len(pods.Items) == want, b.String()
}

func podReady(p *corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

func waitingReason(p *corev1.Pod) string {
	var out []string
	for _, s := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		if w := s.State.Waiting; w != nil {
			out = append(out, s.Name+": "+w.Reason+" "+w.Message)
		}
	}
	return strings.Join(out, "; ")
}

// KubePod is a pod the kubelet runs, as the test sees it.
type KubePod struct {
	Namespace, Name, Node string
	// IP is the pod's IPv4 address (status.podIP), IP6 its IPv6 one on a
	// dual-stack node (from status.podIPs), zero otherwise.
	IP  netip.Addr
	IP6 netip.Addr
}

// Pods returns the pods matching selector in ns.
func (c *Cluster) Pods(tb testing.TB, ns, selector string) []KubePod {
	tb.Helper()
	pods, err := c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		tb.Fatal(err)
	}
	var out []KubePod
	for _, p := range pods.Items {
		kp := KubePod{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName}
		kp.IP, _ = netip.ParseAddr(p.Status.PodIP)
		for _, a := range p.Status.PodIPs {
			if ip, err := netip.ParseAddr(a.IP); err == nil && ip.Is6() {
				kp.IP6 = ip
			}
		}
		out = append(out, kp)
	}
	return out
}

// Exec runs argv in p's first container with kubectl exec, which goes
// through the apiserver to p's kubelet and containerd, as a user's does.
func (c *Cluster) Exec(p KubePod, argv ...string) (string, error) {
	return c.Kubectl(append([]string{"-n", p.Namespace, "exec", p.Name, "--"}, argv...)...)
}

// PingFrom pings target count times from inside p, interval seconds
// apart, and returns what came back and ping's output.
func (c *Cluster) PingFrom(p KubePod, target netip.Addr, count int, interval string) (PingResult, string) {
	out, _ := c.Exec(p, "ping", "-c", fmt.Sprint(count), "-i", interval, "-W", "2", target.String())
	return parsePing(out, target, count), out
}

// Endpoint is p as a ping matrix source (through kubectl exec) and
// destination.
func (c *Cluster) Endpoint(p KubePod) Endpoint { return c.endpoint(p, p.IP) }

// Endpoint6 is Endpoint by p's IPv6 address.
func (c *Cluster) Endpoint6(p KubePod) Endpoint { return c.endpoint(p, p.IP6) }

func (c *Cluster) endpoint(p KubePod, ip netip.Addr) Endpoint {
	return Endpoint{
		Name: p.Name, IP: ip,
		Ping: func(_ context.Context, target netip.Addr, count int) (PingResult, error) {
			r, _ := c.PingFrom(p, target, count, "0.2")
			return r, nil
		},
		WhoAmI: func(_ context.Context, target netip.Addr) (string, error) {
			return c.WhoAmIFrom(p, target.String())
		},
	}
}

// WhoAmIFrom fetches target's /cgi-bin/whoami from inside p: the address
// target saw the request come from.
func (c *Cluster) WhoAmIFrom(p KubePod, target string) (string, error) {
	if strings.Contains(target, ":") { // an IPv6 address
		target = "[" + target + "]"
	}
	out, err := c.Exec(p, "timeout", "10", "wget", "-q", "-O", "-", "http://"+target+"/cgi-bin/whoami")
	return strings.TrimSpace(out), err
}

// DualStack reports whether the real nodes are dual-stack (the first has
// an IPv6 address).
func (c *Cluster) DualStack() bool {
	return len(c.Opts.RealNodes) > 0 && c.Opts.RealNodes[0].IP6.IsValid()
}

// startControlPlaneRoutes runs vmlaned --routes-only on the control plane's
// host, which is not a node (as a user's often is not: kubeadm's
// control-plane nodes are, a managed control plane is not), so that the API
// server reaches pods: its proxy to a pod, webhooks and aggregated APIs
// that pods serve. It routes every node's pod subnets, from
// Options.BinDir's vmlaned with the admin kubeconfig, until the test ends.
func (c *Cluster) startControlPlaneRoutes(tb testing.TB) {
	tb.Helper()
	c.step("vmlaned --routes-only on the control plane's host (no node): every node's pod subnets")
	logPath := filepath.Join(c.dir, "cp-vmlaned.log")
	logf, err := os.Create(logPath)
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", c.CP.NetNS, filepath.Join(c.Opts.BinDir, "vmlaned"),
		"--routes-only", "--node-name", "", "--kubeconfig", c.CP.Kubeconfig,
		"--health-addr", "127.0.0.1:19465", "--metrics-addr", "127.0.0.1:19464")
	cmd.Env = append(os.Environ(), "NODE_NAME=")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		logf.Close()
		if tb.Failed() {
			tb.Logf("the control plane's vmlaned log (%s):\n%s", logPath, controlplane.Tail(logPath, 40))
		}
	})
}

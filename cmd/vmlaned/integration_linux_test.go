package main

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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/vmlane/vmlane/internal/testing/controlplane"
	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/privtest"
)

// cluster is a control plane and node namespaces on one test switch.
type cluster struct {
	tb     testing.TB
	sw     *netnstest.NS
	cp     *controlplane.ControlPlane
	client kubernetes.Interface
	cfg    *rest.Config
	bin    string
}

func newCluster(tb testing.TB) *cluster {
	tb.Helper()
	privtest.Require(tb, "ip", "iptables")
	if _, err := controlplane.Find(); err != nil { // before building anything
		privtest.Missing(tb, err.Error())
	}
	bin := buildBinaries(tb)
	sw := netnstest.New(tb, "sw")
	sw.MustRun(tb, "ip", "link", "add", "sw0", "type", "bridge")
	sw.MustRun(tb, "ip", "link", "set", "sw0", "up")
	cp := controlplane.Start(tb, controlplane.Options{
		Addr: netip.MustParsePrefix("10.99.0.1/24"), SwitchNS: sw.Name, SwitchBridge: "sw0",
	})
	cc := cp.Client()
	// client-go's default 5 QPS would make the benchmark's 5,000 Nodes
	// take 17 minutes; at 500 QPS after a burst of 1000 the limiter alone
	// takes 8 s.
	cfg := &rest.Config{
		Host: cc.Host, BearerToken: cc.BearerToken, QPS: 500, Burst: 1000,
		TLSClientConfig: rest.TLSClientConfig{CAData: cc.CAData}, Dial: cc.Dial,
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return &cluster{tb: tb, sw: sw, cp: cp, client: client, cfg: cfg, bin: bin}
}

// host adds a netns on the switch with addr (CIDR).
func (c *cluster) host(tag, addr string) *netnstest.NS {
	c.tb.Helper()
	n := netnstest.New(c.tb, tag)
	peer := "sw-" + tag
	c.sw.MustRun(c.tb, "ip", "link", "add", peer, "type", "veth", "peer", "name", "eth0")
	c.sw.MustRun(c.tb, "ip", "link", "set", "eth0", "netns", n.Name)
	c.sw.MustRun(c.tb, "ip", "link", "set", peer, "master", "sw0", "up")
	n.MustRun(c.tb, "ip", "addr", "add", addr, "dev", "eth0")
	n.MustRun(c.tb, "ip", "link", "set", "eth0", "up")
	return n
}

func (c *cluster) node(name, podCIDR, ip string) {
	c.tb.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if podCIDR != "" {
		n.Spec.PodCIDR, n.Spec.PodCIDRs = podCIDR, []string{podCIDR}
	}
	n, err := c.client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{})
	if err != nil {
		c.tb.Fatal(err)
	}
	if ip != "" {
		c.setAddr(n.Name, ip)
	}
}

func (c *cluster) setAddr(name, ip string) {
	c.tb.Helper()
	ctx := context.Background()
	n, err := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		c.tb.Fatal(err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
	if _, err := c.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		c.tb.Fatal(err)
	}
}

// daemon runs vmlaned for node in netns n until stopped.
type daemon struct {
	cmd  *exec.Cmd
	logs *syncBuffer
}

func (c *cluster) startDaemon(n *netnstest.NS, node string, dir string) *daemon {
	c.tb.Helper()
	cmd := n.Command(filepath.Join(c.bin, "vmlaned"), "--kubeconfig", c.cp.Kubeconfig, "--node-name", node,
		"--cni-conf-dir", filepath.Join(dir, "net.d"), "--lease-file", filepath.Join(dir, "leases.json"),
		"--resync-period", "2s", "--health-addr", "127.0.0.1:19465", "--metrics-addr", "127.0.0.1:19464")
	d := &daemon{cmd: cmd, logs: &syncBuffer{}}
	cmd.Stderr = d.logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		c.tb.Fatal(err)
	}
	c.tb.Cleanup(func() {
		d.cmd.Process.Kill()
		d.cmd.Wait()
		if c.tb.Failed() {
			c.tb.Logf("vmlaned %s log:\n%s", node, d.logs.String())
		}
	})
	return d
}

func (d *daemon) stop(t *testing.T) {
	t.Helper()
	d.cmd.Process.Signal(syscall.SIGTERM)
	if err := d.cmd.Wait(); err != nil {
		t.Errorf("vmlaned after SIGTERM: %v", err)
	}
}

// eventually polls cond for up to 20 s (the apiserver and vmlaned share two
// cores with the rest of the test run).
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var ok bool
		if ok, last = cond(); ok {
			return
		}
	}
	t.Fatalf("%s: not within 20s; last seen:\n%s", what, last)
}

func routesOf(t *testing.T, n *netnstest.NS) string {
	return n.MustRun(t, "ip", "route", "show", "proto", "77")
}

func hasRoute(t *testing.T, n *netnstest.NS, route string) func() (bool, string) {
	return func() (bool, string) {
		r := routesOf(t, n)
		return strings.Contains(r, route), r
	}
}

func lacksRoute(t *testing.T, n *netnstest.NS, prefix string) func() (bool, string) {
	return func() (bool, string) {
		r := routesOf(t, n)
		return !strings.Contains(r, prefix), r
	}
}

func TestRouteControllerAgainstAPIServer(t *testing.T) {
	c := newCluster(t)
	a := c.host("a", "10.99.0.11/24")
	dir := t.TempDir()
	c.node("a", "10.244.1.0/24", "10.99.0.11")
	c.node("b", "10.244.2.0/24", "10.99.0.12")
	d := c.startDaemon(a, "a", dir)

	eventually(t, "route to b", hasRoute(t, a, "10.244.2.0/24 via 10.99.0.12 dev eth0"))
	// The informer's list came as a stream (WatchList), which the
	// controller taps to install routes while it arrives: every Node
	// went through the tap before the informer could sync.
	if !strings.Contains(d.logs.String(), "nodesStreamed=2 ") {
		t.Errorf("the 'node informer synced' line does not say both Nodes came through the stream tap:\n%s", d.logs.String())
	}
	eventually(t, "NetworkUnavailable=False on a", func() (bool, string) {
		n, err := c.client.CoreV1().Nodes().Get(context.Background(), "a", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeNetworkUnavailable {
				return cond.Status == corev1.ConditionFalse && cond.Reason == "VmlaneIsUp", fmt.Sprintf("%+v", cond)
			}
		}
		return false, "no NetworkUnavailable condition"
	})
	if out := a.MustRun(t, "iptables", "-t", "nat", "-S", "VMLANE-POSTROUTING"); !strings.Contains(out, "-s 10.244.1.0/24 -d 10.244.2.0/24") {
		t.Errorf("no pod-to-pod exemption for b's subnet:\n%s", out)
	}

	t.Run("podCIDR set later", func(t *testing.T) {
		c.node("c", "", "10.99.0.13")
		time.Sleep(500 * time.Millisecond)
		if r := routesOf(t, a); strings.Contains(r, "10.99.0.13") {
			t.Fatalf("route for a node without podCIDR:\n%s", r)
		}
		n, _ := c.client.CoreV1().Nodes().Get(context.Background(), "c", metav1.GetOptions{})
		n.Spec.PodCIDR, n.Spec.PodCIDRs = "10.244.3.0/24", []string{"10.244.3.0/24"}
		if _, err := c.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "route to c", hasRoute(t, a, "10.244.3.0/24 via 10.99.0.13"))
	})

	t.Run("address changed", func(t *testing.T) {
		c.setAddr("b", "10.99.0.22")
		eventually(t, "route to b via its new address", hasRoute(t, a, "10.244.2.0/24 via 10.99.0.22"))
	})

	t.Run("node deleted", func(t *testing.T) {
		if err := c.client.CoreV1().Nodes().Delete(context.Background(), "c", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "route to c gone", lacksRoute(t, a, "10.244.3.0/24"))
	})

	t.Run("route deleted by hand comes back", func(t *testing.T) {
		a.MustRun(t, "ip", "route", "del", "10.244.2.0/24")
		eventually(t, "route restored", hasRoute(t, a, "10.244.2.0/24 via 10.99.0.22"))
	})

	t.Run("node deleted while the daemon is down", func(t *testing.T) {
		d.stop(t)
		if r := routesOf(t, a); !strings.Contains(r, "10.244.2.0/24") {
			t.Fatalf("SIGTERM removed routes:\n%s", r)
		}
		if err := c.client.CoreV1().Nodes().Delete(context.Background(), "b", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		d = c.startDaemon(a, "a", dir)
		eventually(t, "stale route of b swept at start", lacksRoute(t, a, "10.244.2.0/24"))
	})

	t.Run("API server restarted", func(t *testing.T) {
		c.node("e", "10.244.5.0/24", "10.99.0.15")
		eventually(t, "route to e", hasRoute(t, a, "10.244.5.0/24 via 10.99.0.15"))
		c.cp.StopAPIServer()
		time.Sleep(3 * time.Second) // more than a resync period without the API
		if r := routesOf(t, a); !strings.Contains(r, "10.244.5.0/24") {
			t.Fatalf("routes lost while the API server was down:\n%s", r)
		}
		c.cp.StartAPIServer()
		c.node("f", "10.244.6.0/24", "10.99.0.16")
		eventually(t, "route to a node added after the restart", hasRoute(t, a, "10.244.6.0/24 via 10.99.0.16"))
	})
}

// TestRoutesOnlyAgainstAPIServer: vmlaned --routes-only on a node of
// another CNI routes VM nodes only, follows the label both ways, makes
// nothing of full mode's (bridge, conflists, lease file, forwarding
// chain), leaves the other CNI's routes and iptables rules as they were
// and the node's NetworkUnavailable condition unset, masquerades VM
// nodes' DNATed Service traffic as a gateway, warns about the full-mode
// flags it ignores, answers /readyz and /metrics, and keeps its routes
// on SIGTERM.
func TestRoutesOnlyAgainstAPIServer(t *testing.T) {
	c := newCluster(t)
	f := c.host("f", "10.99.0.11/24")
	// What a flannel node has before vmlane comes: its bridge's subnet,
	// a route to another flannel node's subnet and its own rules.
	f.MustRun(t, "ip", "link", "add", "cni0", "type", "bridge")
	f.MustRun(t, "ip", "addr", "add", "10.244.1.1/24", "dev", "cni0")
	f.MustRun(t, "ip", "link", "set", "cni0", "up")
	f.MustRun(t, "ip", "route", "add", "10.244.2.0/24", "via", "10.99.0.12", "proto", "static")
	f.MustRun(t, "iptables", "-t", "nat", "-N", "FLANNEL-POSTRTG")
	f.MustRun(t, "iptables", "-t", "nat", "-A", "POSTROUTING", "-j", "FLANNEL-POSTRTG")
	f.MustRun(t, "iptables", "-t", "nat", "-A", "FLANNEL-POSTRTG", "-s", "10.244.0.0/16", "-d", "10.244.0.0/16", "-j", "RETURN")
	foreignRoutes := f.MustRun(t, "ip", "route", "show")
	foreignRules := func() string {
		var keep []string
		for _, l := range strings.Split(f.MustRun(t, "iptables-save"), "\n") {
			if strings.HasPrefix(l, "-A") && !strings.Contains(l, "VMLANE") {
				keep = append(keep, l)
			}
		}
		return strings.Join(keep, "\n")
	}
	rulesBefore := foreignRules()

	c.node("f", "10.244.1.0/24", "10.99.0.11")
	c.node("g", "10.244.2.0/24", "10.99.0.12")
	c.node("vm", "10.244.3.0/24", "10.99.0.13")
	dir := t.TempDir()
	cmd := f.Command(filepath.Join(c.bin, "vmlaned"), "--routes-only", "--kubeconfig", c.cp.Kubeconfig, "--node-name", "f",
		"--service-cidr", "10.96.0.0/12", "--cni-conf-dir", filepath.Join(dir, "net.d"), "--lease-file", filepath.Join(dir, "leases.json"),
		"--bridge", "vmlane9", "--resync-period", "2s", "--health-addr", "127.0.0.1:19465", "--metrics-addr", "127.0.0.1:19464")
	d := &daemon{cmd: cmd, logs: &syncBuffer{}}
	cmd.Stderr = d.logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		d.cmd.Wait()
		if t.Failed() {
			t.Logf("vmlaned log:\n%s", d.logs.String())
		}
	})
	eventually(t, "ready", func() (bool, string) {
		out, err := f.Run("busybox", "wget", "-qO-", "http://127.0.0.1:19465/readyz")
		return err == nil, out
	})
	if r := routesOf(t, f); r != "" {
		t.Fatalf("routes-only routed nodes that are not VM nodes:\n%s", r)
	}

	label := func(name, value string) {
		t.Helper()
		n, err := c.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		if value == "" {
			delete(n.Labels, "vmlane.io/vm-node")
		} else {
			n.Labels["vmlane.io/vm-node"] = value
		}
		if _, err := c.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	label("vm", "true")
	eventually(t, "route to the labelled VM node", hasRoute(t, f, "10.244.3.0/24 via 10.99.0.13 dev eth0"))
	if r := routesOf(t, f); strings.Contains(r, "10.244.2.0/24") {
		t.Errorf("routes-only routed flannel node g:\n%s", r)
	}
	// The chain is written in the same reconcile as the route, after it:
	// wait for it too. (A listing while vmlaned writes can also fail
	// with iptables-nft 1.8.9's "chain ... is incompatible": retried.)
	eventually(t, "the Service gateway's masquerade of the VM node's subnet", func() (bool, string) {
		out, err := f.Run("iptables", "-t", "nat", "-S", "VMLANE-POSTROUTING")
		return err == nil && strings.Contains(out, "-s 10.244.3.0/24 -m conntrack --ctstate DNAT --ctorigdst 10.96.0.0/12"), out
	})
	if out := f.MustRun(t, "iptables", "-t", "nat", "-S", "VMLANE-POSTROUTING"); strings.Contains(out, "10.244.1.0/24") {
		t.Errorf("Service gateway chain:\n%s\nwant nothing of this node's own subnet", out)
	}
	if out, err := f.Run("iptables", "-S", "VMLANE-FORWARD"); err == nil {
		t.Errorf("routes-only made a forwarding chain:\n%s", out)
	}
	if got := foreignRules(); got != rulesBefore {
		t.Errorf("the other CNI's rules changed:\n%s\nwere:\n%s", got, rulesBefore)
	}
	for _, path := range []string{filepath.Join(dir, "net.d"), filepath.Join(dir, "leases.json")} {
		if _, err := os.Stat(path); err == nil {
			t.Errorf("routes-only made %s", path)
		}
	}
	if out, err := f.Run("ip", "link", "show", "vmlane9"); err == nil {
		t.Errorf("routes-only made a bridge:\n%s", out)
	}
	if !strings.Contains(d.logs.String(), "routes-only mode ignores these flags") || !strings.Contains(d.logs.String(), "--bridge --cni-conf-dir --lease-file") {
		t.Errorf("no warning naming the ignored flags in the log:\n%s", d.logs.String())
	}
	if out, err := f.Run("busybox", "wget", "-qO-", "http://127.0.0.1:19464/metrics"); err != nil || !strings.Contains(out, "vmlane_routes") {
		t.Errorf("/metrics: %v\n%.500s", err, out)
	}
	n, err := c.client.CoreV1().Nodes().Get(context.Background(), "f", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeNetworkUnavailable {
			t.Errorf("routes-only set the node's NetworkUnavailable condition: %+v", cond)
		}
	}

	label("vm", "")
	eventually(t, "route withdrawn with the label", lacksRoute(t, f, "10.244.3.0/24"))
	label("vm", "true")
	eventually(t, "route back with the label", hasRoute(t, f, "10.244.3.0/24 via 10.99.0.13 dev eth0"))
	d.stop(t)
	if r := routesOf(t, f); !strings.Contains(r, "10.244.3.0/24") {
		t.Errorf("SIGTERM removed routes:\n%s", r)
	}
	all := f.MustRun(t, "ip", "route", "show")
	for _, l := range strings.Split(strings.TrimSpace(foreignRoutes), "\n") {
		if !strings.Contains(all, l) {
			t.Errorf("the other CNI's route %q is gone; routes now:\n%s", l, all)
		}
	}
}

// TestRoutesOnlyOnAHostThatIsNoNode: vmlaned --routes-only without a node
// name, as a control plane that is not a node runs it, routes every node's
// pod subnets via its address (not only VM nodes'), follows a node that
// comes later, and writes no Event (it has no Node of its own).
func TestRoutesOnlyOnAHostThatIsNoNode(t *testing.T) {
	c := newCluster(t)
	h := c.host("cp", "10.99.0.20/24")
	c.node("a", "10.244.1.0/24", "10.99.0.11")
	c.node("b", "10.244.2.0/24", "10.99.0.12")
	cmd := h.Command(filepath.Join(c.bin, "vmlaned"), "--routes-only", "--kubeconfig", c.cp.Kubeconfig, "--node-name", "",
		"--resync-period", "2s",
		"--health-addr", "127.0.0.1:19465", "--metrics-addr", "127.0.0.1:19464")
	cmd.Env = append(os.Environ(), "NODE_NAME=")
	d := &daemon{cmd: cmd, logs: &syncBuffer{}}
	cmd.Stderr = d.logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		d.cmd.Wait()
		if t.Failed() {
			t.Logf("vmlaned log:\n%s", d.logs.String())
		}
	})
	eventually(t, "node a's pod subnet routed", hasRoute(t, h, "10.244.1.0/24 via 10.99.0.11"))
	eventually(t, "node b's pod subnet routed", hasRoute(t, h, "10.244.2.0/24 via 10.99.0.12"))
	c.node("c", "10.244.3.0/24", "10.99.0.13")
	eventually(t, "a node that came later routed", hasRoute(t, h, "10.244.3.0/24 via 10.99.0.13"))
	if !strings.Contains(d.logs.String(), "a host that is not a node") {
		t.Errorf("vmlaned did not say it runs on a host that is not a node:\n%s", d.logs.String())
	}
	evs, err := c.client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Source.Component == "vmlaned" {
			t.Errorf("an Event from a host that is not a node: %s %s on %s/%s", e.Reason, e.Message, e.InvolvedObject.Kind, e.InvolvedObject.Name)
		}
	}
}

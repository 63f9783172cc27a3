//go:build e2e

package hybrid

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/vmlane/vmlane/e2e/cluster"
)

// nodesReady reports whether the named nodes are Ready.
func nodesReady(names ...string) (bool, string) {
	var why []string
	for _, name := range names {
		n, err := c.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			why = append(why, err.Error())
			continue
		}
		ready := false
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				ready = true
			}
		}
		if !ready {
			why = append(why, name+" not Ready")
		}
	}
	return len(why) == 0, strings.Join(why, "; ")
}

// flannelState is what flannel made on a node and nothing of vmlane's:
// its routes (vmlane's carry protocol 77), its iptables rules, and the
// conflists. Rule counters are left out.
func flannelState(tb testing.TB, n *cluster.RealNode) string {
	tb.Helper()
	var b strings.Builder
	routes, err := n.Run("", "ip", "route", "show")
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range strings.Split(routes, "\n") {
		// cni0 appears with the first flannel pod (the bridge plugin
		// makes it), after the first snapshot: not flanneld's, nor ours.
		if l != "" && !strings.Contains(l, "proto 77") && !strings.Contains(l, "dev cni0 proto kernel") {
			fmt.Fprintln(&b, "route:", l)
		}
	}
	rules, err := n.Run("", "iptables-save")
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range strings.Split(rules, "\n") {
		if strings.Contains(l, "FLANNEL") {
			fmt.Fprintln(&b, "rule:", l)
		}
	}
	conf, err := n.Run("", "sh", "-c", "cd /etc/cni/net.d && for f in *; do echo \"== $f\"; cat \"$f\"; done")
	if err != nil {
		tb.Fatal(err)
	}
	b.WriteString(conf)
	return b.String()
}

// deployWeb runs the web Deployment with two pods a node: flannel's on
// the flannel nodes, vmlane's on the VM nodes.
func deployWeb(tb testing.TB) map[string][]cluster.KubePod {
	tb.Helper()
	c.Apply(tb, cluster.Workloads)
	n := 2 * len(c.RealNodes)
	c.MustKubectl(tb, "scale", "deployment/web", fmt.Sprintf("--replicas=%d", n))
	cluster.WaitFor(tb, 4*time.Minute, "Deployment web ready", func() (bool, string) {
		return c.PodsReady("default", "app=web", n)
	})
	out := map[string][]cluster.KubePod{}
	for _, p := range c.Pods(tb, "default", "app=web") {
		out[p.Node] = append(out[p.Node], p)
	}
	for _, node := range append(append([]string(nil), flannelNodes...), vmNodes...) {
		if len(out[node]) == 0 {
			tb.Fatalf("no web pod on %s: %v", node, out)
		}
	}
	return out
}

func podCIDR(t *testing.T, node string) netip.Prefix {
	t.Helper()
	n, err := c.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return netip.MustParsePrefix(n.Spec.PodCIDRs[0])
}

// TestFlannelStateUntouched: flannel's routes, iptables rules and
// conflist are what flannel made before vmlane came.
func TestFlannelStateUntouched(t *testing.T) {
	for _, name := range flannelNodes {
		n := c.RealNode(name)
		if got := flannelState(t, n); got != flannelBefore[name] {
			t.Errorf("%s: flannel's state changed with vmlane running.\nbefore:\n%s\nnow:\n%s", name, flannelBefore[name], got)
		}
		// And vmlane's routes-only daemon made its routes: one per VM node.
		routes := n.Routes()
		for _, vm := range vmNodes {
			if !strings.Contains(routes, podCIDR(t, vm).String()) {
				t.Errorf("%s has no route to %s's pod subnet %s:\n%s", name, vm, podCIDR(t, vm), routes)
			}
		}
		if strings.Contains(routes, podCIDR(t, otherFlannel(name)).String()) {
			t.Errorf("%s: vmlane routes flannel node %s's subnet:\n%s", name, otherFlannel(name), routes)
		}
	}
}

func otherFlannel(name string) string {
	if name == flannelNodes[0] {
		return flannelNodes[1]
	}
	return flannelNodes[0]
}

// TestFlannelPodsAndVMsBothWays: flannel pods reach both VMs by pod IP,
// and the VMs see them with their own addresses; each VM's guest pinged a
// flannel pod; vmlane's plain pods on the VM nodes reach flannel pods,
// which see them with their own addresses: no NAT either way.
func TestFlannelPodsAndVMsBothWays(t *testing.T) {
	for i, name := range []string{"vm-1", "vm-2"} {
		vm := vms[name]
		for _, fn := range flannelNodes {
			src := web[fn][0]
			if r, out := c.PingFrom(src, vm.IP, 3, "0.2"); !r.OK {
				t.Errorf("%s (%s) → %s (%s): %d of 3 pings answered\n%s", src.Name, fn, name, vm.Node, r.Recv, out)
			}
			if seen, err := c.WhoAmIFrom(src, vm.IP.String()); err != nil || seen != src.IP.String() {
				t.Errorf("%s → %s: seen as %q (%v), want %s", src.Name, name, seen, err, src.IP)
			}
		}
		log, _ := c.Kubectl("logs", name)
		target := web[flannelNodes[i]][0].IP.String()
		if !strings.Contains(log, "VMLANE-PING ok target="+target) {
			t.Errorf("%s's guest did not ping flannel pod %s:\n%s", name, target, log)
		}
	}
	for _, vn := range vmNodes {
		src := web[vn][0]
		for _, fn := range flannelNodes {
			dst := web[fn][0]
			if seen, err := c.WhoAmIFrom(src, dst.IP.String()); err != nil || seen != src.IP.String() {
				t.Errorf("%s (%s) → %s (%s): seen as %q (%v), want %s", src.Name, vn, dst.Name, fn, seen, err, src.IP)
			}
			if seen, err := c.WhoAmIFrom(dst, src.IP.String()); err != nil || seen != dst.IP.String() {
				t.Errorf("%s (%s) → %s (%s): seen as %q (%v), want %s", dst.Name, fn, src.Name, vn, seen, err, dst.IP)
			}
		}
	}
}

// TestServiceToVM: a flannel pod reaches a VM through a ClusterIP Service
// (kube-proxy's DNAT on the flannel node, then vmlane's route), and the
// VM sees the flannel pod's own address.
func TestServiceToVM(t *testing.T) {
	c.Apply(t, `apiVersion: v1
kind: Service
metadata: {name: vm1, namespace: default}
spec:
  selector: {app: vm}
  ports: [{port: 80, targetPort: 80}]
`)
	// Only vm-1 behind it: the selector matches both VM pods, so name it.
	c.MustKubectl(t, "label", "pod", "vm-1", "svc=vm1", "--overwrite")
	c.MustKubectl(t, "patch", "service", "vm1", "-p", `{"spec":{"selector":{"app":"vm","svc":"vm1"}}}`)
	svc, err := c.Client.CoreV1().Services("default").Get(context.Background(), "vm1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src := web["flannel-b"][0]
	cluster.WaitFor(t, time.Minute, "vm-1 through Service vm1 from "+src.Name, func() (bool, string) {
		seen, err := c.WhoAmIFrom(src, svc.Spec.ClusterIP)
		return err == nil && seen == src.IP.String(), fmt.Sprintf("seen as %q (%v), want %s", seen, err, src.IP)
	})
}

// TestServiceFromNodeWithoutKubeProxy: pods on the Mac stand-in, which
// runs no kube-proxy, reach the web Service through their Service
// gateway (a flannel node), whose masquerade makes the backend see the
// gateway, not the pod; the stand-in routes the Service CIDR via a
// flannel node.
func TestServiceFromNodeWithoutKubeProxy(t *testing.T) {
	mac := c.RealNode("mac-node")
	routes := mac.Routes()
	if !strings.Contains(routes, "10.96.0.0/16 via 10.99.0.11") && !strings.Contains(routes, "10.96.0.0/16 via 10.99.0.12") {
		t.Fatalf("mac-node does not route the Service CIDR via a flannel node:\n%s", routes)
	}
	svc, err := c.Client.CoreV1().Services("default").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src := web["mac-node"][0]
	served := map[string]bool{}
	for i := range 12 {
		out, err := c.Exec(src, "timeout", "10", "wget", "-q", "-O", "-", "http://"+svc.Spec.ClusterIP+"/cgi-bin/whoserves")
		seen, backend, _ := strings.Cut(strings.TrimSpace(out), " ")
		if err != nil || backend == "" {
			t.Fatalf("request %d to Service web (%s) from %s on the node without kube-proxy: %q (%v)", i, svc.Spec.ClusterIP, src.Name, out, err)
		}
		if seen == src.IP.String() {
			t.Errorf("request %d: backend %s saw the pod's own address %s: the gateway did not masquerade (its replies would not come back through it)", i, backend, seen)
		}
		served[backend] = true
	}
	t.Logf("Service web from %s: served by %d backends", src.Name, len(served))
}

// TestLabelRoutes: labelling a node as a VM node routes to it from the
// flannel nodes within seconds, and removing the label withdraws the
// routes. The node is an API object only (no kubelet): node IPAM gives it
// a podCIDR, and its InternalIP is set by hand.
func TestLabelRoutes(t *testing.T) {
	ctx := context.Background()
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "vm-late"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Client.CoreV1().Nodes().Delete(context.Background(), "vm-late", metav1.DeleteOptions{}) })
	// The node IPAM controller updates the new Node too: retry on
	// conflict.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, "vm-late", metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.99.0.50"}}
		_, err = c.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var cidr string
	cluster.WaitFor(t, time.Minute, "vm-late's podCIDR from node IPAM", func() (bool, string) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, "vm-late", metav1.GetOptions{})
		if err != nil || len(n.Spec.PodCIDRs) == 0 {
			return false, fmt.Sprint(err)
		}
		cidr = n.Spec.PodCIDRs[0]
		return true, ""
	})
	want := cidr + " via 10.99.0.50"
	time.Sleep(2 * time.Second)
	for _, fn := range flannelNodes {
		if r := c.RealNode(fn).Routes(); strings.Contains(r, cidr) {
			t.Fatalf("%s routes the unlabelled node:\n%s", fn, r)
		}
	}
	start := time.Now()
	c.MustKubectl(t, "label", "node", "vm-late", "vmlane.io/vm-node=true")
	for _, fn := range flannelNodes {
		cluster.WaitFor(t, 30*time.Second, fn+" routes the labelled node", func() (bool, string) {
			r := c.RealNode(fn).Routes()
			return strings.Contains(r, want), r
		})
	}
	t.Logf("labelled: routed on both flannel nodes after %v", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	c.MustKubectl(t, "label", "node", "vm-late", "vmlane.io/vm-node-")
	for _, fn := range flannelNodes {
		cluster.WaitFor(t, 30*time.Second, fn+" withdraws the route", func() (bool, string) {
			r := c.RealNode(fn).Routes()
			return !strings.Contains(r, cidr), r
		})
	}
	t.Logf("unlabelled: withdrawn on both flannel nodes after %v", time.Since(start).Round(time.Millisecond))
}

// TestRestartUnderTraffic: restarting vmlane's pods (routes-only on a
// flannel node, full on the VM node) loses no ping between a flannel pod
// and a VM: routes and rules stay while vmlaned is away.
func TestRestartUnderTraffic(t *testing.T) {
	src, vm := web["flannel-a"][0], vms["vm-1"]
	type result struct {
		r   cluster.PingResult
		out string
	}
	done := make(chan result, 1)
	go func() {
		r, out := c.PingFrom(src, vm.IP, 60, "0.2")
		done <- result{r, out}
	}()
	time.Sleep(2 * time.Second)
	c.MustKubectl(t, "-n", "vmlane-system", "delete", "pod", "-l", "app.kubernetes.io/name=vmlane-routes", "--field-selector", "spec.nodeName=flannel-a", "--wait=false")
	c.MustKubectl(t, "-n", "vmlane-system", "delete", "pod", "-l", "app.kubernetes.io/name=vmlane", "--wait=false")
	res := <-done
	if res.r.Recv != 60 {
		t.Errorf("%s → %s while vmlane's pods restarted: %d of 60 pings answered\n%s", src.Name, vm.Name, res.r.Recv, res.out)
	}
	cluster.WaitFor(t, 2*time.Minute, "vmlane DaemonSets ready again", func() (bool, string) {
		if ok, why := c.PodsReady("vmlane-system", "app.kubernetes.io/name=vmlane-routes", len(flannelNodes)); !ok {
			return false, why
		}
		return c.PodsReady("vmlane-system", "app.kubernetes.io/name=vmlane", 1)
	})
}

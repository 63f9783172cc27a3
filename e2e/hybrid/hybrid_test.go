//go:build e2e

package hybrid

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/vmlane/vmlane/e2e/cluster"
	"github.com/vmlane/vmlane/internal/testing/testvm"
)

func podCIDR(t *testing.T, node string) netip.Prefix { return podCIDRs(t, node)[0] }

// podCIDRs are the node's podCIDRs, IPv4 then IPv6.
func podCIDRs(t *testing.T, node string) []netip.Prefix {
	t.Helper()
	n, err := h.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Spec.PodCIDRs) != 2 {
		t.Fatalf("node %s has podCIDRs %v, want one of each family", node, n.Spec.PodCIDRs)
	}
	return []netip.Prefix{netip.MustParsePrefix(n.Spec.PodCIDRs[0]), netip.MustParsePrefix(n.Spec.PodCIDRs[1])}
}

// TestFlannelStateUntouched: flannel's routes, iptables rules and
// conflist are what flannel made before vmlane came.
func TestFlannelStateUntouched(t *testing.T) {
	for _, name := range flannelNodes {
		n := h.RealNode(name)
		got, err := n.FlannelState()
		if err != nil {
			t.Fatal(err)
		}
		if got != h.FlannelBefore[name] {
			t.Errorf("%s: flannel's state changed with vmlane running.\nbefore:\n%s\nnow:\n%s", name, h.FlannelBefore[name], got)
		}
		// And vmlane's routes-only daemon made its routes: one per VM node
		// and family.
		routes := n.Routes() + "\n" + n.Routes6()
		for _, vm := range vmNodes {
			for _, p := range podCIDRs(t, vm) {
				if !strings.Contains(routes, p.String()) {
					t.Errorf("%s has no route to %s's pod subnet %s:\n%s", name, vm, p, routes)
				}
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
// IPv4 and IPv6, and the VMs see them with their own addresses; each VM's
// guest pinged a flannel pod; vmlane's plain pods on the VM nodes reach
// flannel pods, which see them with their own addresses: no NAT either
// way, in either family.
func TestFlannelPodsAndVMsBothWays(t *testing.T) {
	for i, name := range cluster.HybridVMs {
		vm := h.VMs[name]
		for _, fn := range flannelNodes {
			src := h.Web[fn][0]
			for _, a := range [][2]netip.Addr{{src.IP, vm.IP}, {src.IP6, vm.IP6}} {
				from, to := a[0], a[1]
				if !from.IsValid() || !to.IsValid() {
					t.Errorf("%s (%s) or %s has no address of the family: %v, %v", src.Name, fn, name, from, to)
					continue
				}
				if r, out := h.PingFrom(src, to, 3, "0.2"); !r.OK {
					t.Errorf("%s (%s) → %s (%s) at %s: %d of 3 pings answered\n%s", src.Name, fn, name, vm.Node, to, r.Recv, out)
				}
				if seen, err := h.WhoAmIFrom(src, to.String()); err != nil || seen != from.String() {
					t.Errorf("%s → %s at %s: seen as %q (%v), want %s", src.Name, name, to, seen, err, from)
				}
			}
		}
		log, _ := h.Kubectl("logs", name)
		target := h.Web[flannelNodes[i]][0].IP.String()
		if !strings.Contains(log, "VMLANE-PING ok target="+target) {
			t.Errorf("%s's guest did not ping flannel pod %s:\n%s", name, target, log)
		}
	}
	for _, vn := range vmNodes {
		src := h.Web[vn][0]
		for _, fn := range flannelNodes {
			dst := h.Web[fn][0]
			for _, a := range [][2]netip.Addr{{src.IP, dst.IP}, {src.IP6, dst.IP6}} {
				if seen, err := h.WhoAmIFrom(src, a[1].String()); err != nil || seen != a[0].String() {
					t.Errorf("%s (%s) → %s (%s) at %s: seen as %q (%v), want %s", src.Name, vn, dst.Name, fn, a[1], seen, err, a[0])
				}
				if seen, err := h.WhoAmIFrom(dst, a[0].String()); err != nil || seen != a[1].String() {
					t.Errorf("%s (%s) → %s (%s) at %s: seen as %q (%v), want %s", dst.Name, fn, src.Name, vn, a[0], seen, err, a[1])
				}
			}
		}
	}
}

// TestServiceToVM: a flannel pod reaches a VM through a ClusterIP Service
// (kube-proxy's DNAT on the flannel node, then vmlane's route), and the
// VM sees the flannel pod's own address.
func TestServiceToVM(t *testing.T) {
	h.Apply(t, `apiVersion: v1
kind: Service
metadata: {name: vm1, namespace: default}
spec:
  selector: {app: vm}
  ports: [{port: 80, targetPort: 80}]
`)
	// Only vm-1 behind it: the selector matches both VM pods, so name it.
	h.MustKubectl(t, "label", "pod", "vm-1", "svc=vm1", "--overwrite")
	h.MustKubectl(t, "patch", "service", "vm1", "-p", `{"spec":{"selector":{"app":"vm","svc":"vm1"}}}`)
	svc, err := h.Client.CoreV1().Services("default").Get(context.Background(), "vm1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src := h.Web["flannel-b"][0]
	cluster.WaitFor(t, time.Minute, "vm-1 through Service vm1 from "+src.Name, func() (bool, string) {
		seen, err := h.WhoAmIFrom(src, svc.Spec.ClusterIP)
		return err == nil && seen == src.IP.String(), fmt.Sprintf("seen as %q (%v), want %s", seen, err, src.IP)
	})
}

// TestServiceFromNodeWithoutKubeProxy: pods on the Mac stand-in, which
// runs no kube-proxy, reach the web Service through their Service
// gateway (a flannel node), whose masquerade makes the backend see the
// gateway, not the pod; the stand-in routes the Service CIDR via a
// flannel node.
func TestServiceFromNodeWithoutKubeProxy(t *testing.T) {
	mac := h.RealNode("mac-node")
	routes := mac.Routes()
	if !strings.Contains(routes, "10.96.0.0/16 via 10.99.0.11") && !strings.Contains(routes, "10.96.0.0/16 via 10.99.0.12") {
		t.Fatalf("mac-node does not route the Service CIDR via a flannel node:\n%s", routes)
	}
	svc, err := h.Client.CoreV1().Services("default").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src := h.Web["mac-node"][0]
	served := map[string]bool{}
	for i := range 12 {
		out, err := h.Exec(src, "timeout", "10", "wget", "-q", "-O", "-", "http://"+svc.Spec.ClusterIP+"/cgi-bin/whoserves")
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
	if _, err := h.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "vm-late"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Client.CoreV1().Nodes().Delete(context.Background(), "vm-late", metav1.DeleteOptions{}) })
	// The node IPAM controller updates the new Node too: retry on
	// conflict.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := h.Client.CoreV1().Nodes().Get(ctx, "vm-late", metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.99.0.50"}}
		_, err = h.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var cidr string
	cluster.WaitFor(t, time.Minute, "vm-late's podCIDR from node IPAM", func() (bool, string) {
		n, err := h.Client.CoreV1().Nodes().Get(ctx, "vm-late", metav1.GetOptions{})
		if err != nil || len(n.Spec.PodCIDRs) == 0 {
			return false, fmt.Sprint(err)
		}
		cidr = n.Spec.PodCIDRs[0]
		return true, ""
	})
	want := cidr + " via 10.99.0.50"
	time.Sleep(2 * time.Second)
	for _, fn := range flannelNodes {
		if r := h.RealNode(fn).Routes(); strings.Contains(r, cidr) {
			t.Fatalf("%s routes the unlabelled node:\n%s", fn, r)
		}
	}
	start := time.Now()
	h.MustKubectl(t, "label", "node", "vm-late", "vmlane.io/vm-node=true")
	for _, fn := range flannelNodes {
		cluster.WaitFor(t, 30*time.Second, fn+" routes the labelled node", func() (bool, string) {
			r := h.RealNode(fn).Routes()
			return strings.Contains(r, want), r
		})
	}
	t.Logf("labelled: routed on both flannel nodes after %v", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	h.MustKubectl(t, "label", "node", "vm-late", "vmlane.io/vm-node-")
	for _, fn := range flannelNodes {
		cluster.WaitFor(t, 30*time.Second, fn+" withdraws the route", func() (bool, string) {
			r := h.RealNode(fn).Routes()
			return !strings.Contains(r, cidr), r
		})
	}
	t.Logf("unlabelled: withdrawn on both flannel nodes after %v", time.Since(start).Round(time.Millisecond))
}

// pingDuring has a flannel pod ping a VM 60 times, 0.2 s apart, and runs
// disrupt 2 s in: it fails t unless every ping was answered.
func pingDuring(t *testing.T, what string, disrupt func()) {
	t.Helper()
	src, vm := h.Web["flannel-a"][0], h.VMs["vm-1"]
	type result struct {
		r   cluster.PingResult
		out string
	}
	done := make(chan result, 1)
	go func() {
		r, out := h.PingFrom(src, vm.IP, 60, "0.2")
		done <- result{r, out}
	}()
	time.Sleep(2 * time.Second)
	disrupt()
	res := <-done
	if res.r.Recv != 60 {
		t.Errorf("%s → %s while %s: %d of 60 pings answered\n%s", src.Name, vm.Name, what, res.r.Recv, res.out)
	}
}

// TestRestartUnderTraffic: restarting vmlane's pods (routes-only on a
// flannel node, full on the VM node), or flanneld on both flannel nodes,
// loses no ping between a flannel pod and a VM: vmlane's routes and rules
// stay while vmlaned is away, and flannel's restart does not touch them.
func TestRestartUnderTraffic(t *testing.T) {
	t.Run("vmlane", func(t *testing.T) {
		pingDuring(t, "vmlane's pods restarted", func() {
			h.MustKubectl(t, "-n", "vmlane-system", "delete", "pod", "-l", "app.kubernetes.io/name=vmlane-routes", "--field-selector", "spec.nodeName=flannel-a", "--wait=false")
			h.MustKubectl(t, "-n", "vmlane-system", "delete", "pod", "-l", "app.kubernetes.io/name=vmlane", "--wait=false")
		})
		cluster.WaitFor(t, 2*time.Minute, "vmlane DaemonSets ready again", h.DaemonSetsReady)
	})
	t.Run("flannel", func(t *testing.T) {
		// SIGTERM, as the kubelet stops kube-flannel's container; the
		// node starts flanneld again a second later (node-init.sh).
		old := map[string][]int{}
		pingDuring(t, "flanneld restarted on both flannel nodes", func() {
			for _, name := range flannelNodes {
				pids, err := h.RealNode(name).Signal("flanneld", syscall.SIGTERM)
				if err != nil {
					t.Fatal(err)
				}
				old[name] = pids
			}
			start := time.Now()
			for _, name := range flannelNodes {
				n := h.RealNode(name)
				cluster.WaitFor(t, 30*time.Second, "flanneld running again on "+name, func() (bool, string) {
					pids := n.Pids("flanneld")
					return len(pids) == 1 && !slices.Contains(old[name], pids[0]), fmt.Sprintf("flanneld pids %v (before: %v)", pids, old[name])
				})
				t.Logf("%s: flanneld %v stopped, %v running after %v", name, old[name], n.Pids("flanneld"), time.Since(start).Round(time.Millisecond))
			}
		})
		// And flannel, back, made what it had made (its conflist, routes
		// and rules), and vmlane's routes are still there.
		for _, name := range flannelNodes {
			n := h.RealNode(name)
			cluster.WaitFor(t, time.Minute, name+": flannel's state as before", func() (bool, string) {
				got, err := n.FlannelState()
				return err == nil && got == h.FlannelBefore[name], fmt.Sprintf("%v\nbefore:\n%s\nnow:\n%s", err, h.FlannelBefore[name], got)
			})
			for _, vm := range vmNodes {
				if r := n.Routes(); !strings.Contains(r, podCIDR(t, vm).String()) {
					t.Errorf("%s lost its route to %s after flanneld's restart:\n%s", name, vm, r)
				}
			}
		}
	})
}

// TestServiceFromVMWithoutKubeProxy: the VM on the Mac stand-in, which
// runs no kube-proxy, fetched Service web's /cgi-bin/whoserves from inside
// its guest at boot: through its node's route to the Service gateway,
// whose masquerade makes the backend see the gateway, not the VM.
func TestServiceFromVMWithoutKubeProxy(t *testing.T) {
	vm := h.VMs["vm-2"]
	var rep testvm.Result
	cluster.WaitFor(t, time.Minute, vm.Name+"'s guest reports its fetch of Service web", func() (bool, string) {
		var err error
		rep, err = h.GuestReport(vm.Name)
		return err == nil && len(rep.Fetches) > 0, fmt.Sprintf("%v\n%s", err, rep.Console)
	})
	f := rep.Fetches[0]
	if !f.OK {
		t.Fatalf("%s's guest on %s could not fetch %s: %s\n%s", vm.Name, vm.Node, f.URL, f.Err, rep.Console)
	}
	seen, backend, _ := strings.Cut(f.Body, "_")
	if !strings.HasPrefix(backend, "web-") {
		t.Errorf("%s fetched %s: body %q, want the client address and a web pod's name", vm.Name, f.URL, f.Body)
	}
	if seen == vm.IP.String() {
		t.Errorf("backend %s saw the VM's own address %s: the Service gateway did not masquerade", backend, seen)
	}
	if _, err := netip.ParseAddr(seen); err != nil {
		t.Errorf("backend %s saw %q, not an address", backend, seen)
	}
	t.Logf("%s (%s) → Service web (%s): served by %s, which saw %s", vm.Name, vm.IP, h.WebIP, backend, seen)
}

// TestVMMoveSeenByFlannelNodes: a VM (annotated vmlane.io/vm) moves from
// vm-node to mac-node with its addresses; the flannel nodes' routes-only
// vmlaned, which watches the VMClaims, routes its /32 and /128 to mac-node,
// and a flannel pod reaches it there without NAT.
func TestVMMoveSeenByFlannelNodes(t *testing.T) {
	t.Cleanup(func() {
		h.Kubectl("delete", "pod", "hvm-1", "hvm-2", "--ignore-not-found", "--wait=true", "--timeout=60s")
	})
	first := h.StartVMPod(t, "hvm-1", vmNodes[0], cluster.VMGuest{VM: "hvm"})
	addr := h.WaitGuest(t, "hvm-1")
	if out, err := h.Kubectl("delete", "pod", "hvm-1", "--wait=true", "--timeout=90s"); err != nil {
		t.Fatal(out, err)
	}
	second := h.StartVMPod(t, "hvm-2", vmNodes[1], cluster.VMGuest{VM: "hvm"})
	if got := h.WaitGuest(t, "hvm-2"); got != addr || second.IP6 != first.IP6 {
		t.Fatalf("hvm-2 on %s: guest got %s, pod IPv6 %s; want the VM's %s, %s", vmNodes[1], got, second.IP6, addr, first.IP6)
	}
	via4, via6 := h.RealNode(vmNodes[1]).IP.String(), h.RealNode(vmNodes[1]).IP6.String()
	for _, fn := range flannelNodes {
		n := h.RealNode(fn)
		cluster.WaitFor(t, 10*time.Second, fn+" routes the moved VM via "+vmNodes[1], func() (bool, string) {
			r4, r6 := n.Routes(), n.Routes6()
			return strings.Contains(r4, addr.String()+" via "+via4) && strings.Contains(r6, first.IP6.String()+" via "+via6), r4 + r6
		})
		src := h.Web[fn][0]
		if r, out := h.PingFrom(src, addr, 3, "0.2"); !r.OK {
			t.Errorf("%s (%s) → the moved VM %s: %d of 3 pings answered\n%s", src.Name, fn, addr, r.Recv, out)
		}
		if seen, err := h.WhoAmIFrom(src, addr.String()); err != nil || seen != src.IP.String() {
			t.Errorf("%s (%s) → the moved VM %s: seen as %q (%v), want %s", src.Name, fn, addr, seen, err, src.IP)
		}
	}
}

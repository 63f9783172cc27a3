package cluster

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The hybrid cluster's nodes: two run flannel (the cluster's own CNI) and
// vmlane's routes-only DaemonSet; two are VM nodes labelled
// vmlane.io/vm-node=true, one running vmlane's full DaemonSet and
// kube-proxy, one a stand-in for a Mac (no kube-proxy, vmlaned run by the
// node itself with --route-services).
var (
	HybridFlannelNodes = []string{"flannel-a", "flannel-b"}
	HybridVMNodes      = []string{"vm-node", "mac-node"}
)

// Hybrid is a running hybrid cluster: flannel's nodes, vmlane's VM nodes,
// a web pod or two on each, and a VM on each VM node.
type Hybrid struct {
	*Cluster
	// FlannelBefore is each flannel node's FlannelState before vmlane's
	// manifests were applied.
	FlannelBefore map[string]string
	// Web are the web Deployment's pods by node; WebIP is the ClusterIP
	// of Service web in front of them.
	Web   map[string][]KubePod
	WebIP string
	// VMs by pod name: vm-1 on vm-node, which pinged flannel-a's first
	// web pod at boot; vm-2 on mac-node, which pinged flannel-b's and
	// fetched Service web's /cgi-bin/whoserves (GuestReport).
	VMs map[string]KubePod
}

// HybridVMs names the VM pods, one for each of HybridVMNodes.
var HybridVMs = []string{"vm-1", "vm-2"}

// NewHybrid builds the hybrid cluster with o (its RealNodes are set
// here; Overlay is the hybrid install, manifests/hybrid with the image
// built here): flannel alone first, until its nodes are Ready and its
// state is recorded, then vmlane's manifests, the web Deployment on every
// node and the two VMs, whose guests have their addresses when it
// returns.
func NewHybrid(tb testing.TB, o Options) *Hybrid {
	tb.Helper()
	vm := []string{"vmlane.io/vm-node=true"}
	o.DeferOverlay = true
	// Dual-stack, flannel too (EnableIPv6): the nodes' addresses and
	// podCIDRs are of both families.
	o.RealNodes = []RealNodeSpec{
		{Name: HybridFlannelNodes[0], IP: netip.MustParseAddr("10.99.0.11"), IP6: netip.MustParseAddr("fd99::11"), Runtime: Containerd, Flannel: true},
		{Name: HybridFlannelNodes[1], IP: netip.MustParseAddr("10.99.0.12"), IP6: netip.MustParseAddr("fd99::12"), Runtime: Containerd, Flannel: true},
		{Name: HybridVMNodes[0], IP: netip.MustParseAddr("10.99.0.13"), IP6: netip.MustParseAddr("fd99::13"), Runtime: Containerd, Labels: vm},
		{Name: HybridVMNodes[1], IP: netip.MustParseAddr("10.99.0.14"), IP6: netip.MustParseAddr("fd99::14"), Runtime: Containerd, MacStandIn: true,
			Labels: append(vm, "e2e.vmlane.io/mac-stand-in=true")},
	}
	h := &Hybrid{Cluster: NewReal(tb, o), FlannelBefore: map[string]string{}, VMs: map[string]KubePod{}}
	h.step("flannel alone first: its nodes Ready, and what it made on them")
	WaitFor(tb, 3*time.Minute, "flannel nodes Ready", func() (bool, string) { return h.NamedNodesReady(HybridFlannelNodes...) })
	for _, n := range HybridFlannelNodes {
		st, err := h.RealNode(n).FlannelState()
		if err != nil {
			tb.Fatal(err)
		}
		h.FlannelBefore[n] = st
	}
	h.ApplyOverlay(tb)
	WaitFor(tb, 3*time.Minute, "vmlane DaemonSets ready", h.DaemonSetsReady)
	WaitFor(tb, 2*time.Minute, "nodes Ready", h.NodesReady)
	h.deployWeb(tb)
	svc, err := h.Client.CoreV1().Services("default").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	h.WebIP = svc.Spec.ClusterIP
	guests := []VMGuest{
		{Ping: []netip.Addr{h.Web[HybridFlannelNodes[0]][0].IP}},
		// The Mac stand-in's VM reaches a Service with no kube-proxy on
		// its node: through its Service gateway.
		{Ping: []netip.Addr{h.Web[HybridFlannelNodes[1]][0].IP}, Fetch: []string{"http://" + h.WebIP + "/cgi-bin/whoserves"}},
	}
	for i, name := range HybridVMs {
		h.VMs[name] = h.StartVMPod(tb, name, HybridVMNodes[i], guests[i])
	}
	for _, name := range HybridVMs {
		h.WaitGuest(tb, name)
		// Held: done with its boot-time pings and fetches.
		WaitFor(tb, 2*time.Minute, name+"'s guest done with its pings and fetches", func() (bool, string) {
			rep, err := h.GuestReport(name)
			return err == nil && rep.Held, fmt.Sprintf("%v\n%s", err, rep.Console)
		})
	}
	return h
}

// DaemonSetsReady reports whether vmlane's two DaemonSets are ready: the
// routes-only one on each flannel node, the full one on vm-node (the Mac
// stand-in runs vmlaned itself).
func (h *Hybrid) DaemonSetsReady() (bool, string) {
	if ok, why := h.PodsReady("vmlane-system", "app.kubernetes.io/name=vmlane-routes", len(HybridFlannelNodes)); !ok {
		return false, why
	}
	return h.PodsReady("vmlane-system", "app.kubernetes.io/name=vmlane", 1)
}

// deployWeb runs the web Deployment with two pods a node: flannel's on
// the flannel nodes, vmlane's on the VM nodes.
func (h *Hybrid) deployWeb(tb testing.TB) {
	tb.Helper()
	h.step("Deployment web, two pods a node, and Service web")
	h.Apply(tb, Workloads)
	n := 2 * len(h.RealNodes)
	h.MustKubectl(tb, "scale", "deployment/web", fmt.Sprintf("--replicas=%d", n))
	WaitFor(tb, 4*time.Minute, "Deployment web ready", func() (bool, string) {
		return h.PodsReady("default", "app=web", n)
	})
	h.Web = map[string][]KubePod{}
	for _, p := range h.Pods(tb, "default", "app=web") {
		h.Web[p.Node] = append(h.Web[p.Node], p)
	}
	for _, node := range slices.Concat(HybridFlannelNodes, HybridVMNodes) {
		if len(h.Web[node]) == 0 {
			tb.Fatalf("no web pod on %s: %v", node, h.Web)
		}
	}
}

// NamedNodesReady reports whether the named Nodes are Ready.
func (c *Cluster) NamedNodesReady(names ...string) (bool, string) {
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

// FlannelState is what flannel made on a flannel node and nothing of
// vmlane's: its routes of both families (vmlane's carry protocol 77), its
// iptables and ip6tables rules (counters left out), and the conflists.
func (n *RealNode) FlannelState() (string, error) {
	var b strings.Builder
	for _, family := range []string{"-4", "-6"} {
		routes, err := n.Run("", "ip", family, "route", "show")
		if err != nil {
			return "", err
		}
		for _, l := range strings.Split(routes, "\n") {
			// cni0 appears with the first flannel pod (the bridge
			// plugin makes it), after the first snapshot: not
			// flanneld's, nor ours; so do the kernel's link-local
			// routes of the pods' veths.
			if l != "" && !strings.Contains(l, "proto 77") && !strings.Contains(l, "dev cni0 proto kernel") &&
				!strings.HasPrefix(l, "fe80::/64 dev veth") {
				fmt.Fprintln(&b, "route:", l)
			}
		}
	}
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		rules, err := n.Run("", save)
		if err != nil {
			return "", err
		}
		for _, l := range strings.Split(rules, "\n") {
			if strings.Contains(l, "FLANNEL") {
				fmt.Fprintln(&b, "rule:", l)
			}
		}
	}
	conf, err := n.Run("", "sh", "-c", "cd /etc/cni/net.d && for f in *; do echo \"== $f\"; cat \"$f\"; done")
	if err != nil {
		return "", err
	}
	b.WriteString(conf)
	return b.String(), nil
}

// HybridMatrices have a web pod of every node (flannel's and vmlane's)
// ping and fetch the whoami of every VM and of every other such pod:
// flannel pods and VMs both ways round, by pod IP, IPv4 then IPv6.
func (h *Hybrid) HybridMatrices(ctx context.Context) []*Matrix {
	var ms []*Matrix
	for _, ep := range []func(KubePod) Endpoint{h.Endpoint, h.Endpoint6} {
		var srcs, dsts []Endpoint
		for _, n := range slices.Concat(HybridFlannelNodes, HybridVMNodes) {
			srcs = append(srcs, ep(h.Web[n][0]))
		}
		for _, name := range HybridVMs {
			dsts = append(dsts, ep(h.VMs[name]))
		}
		ms = append(ms, EndpointMatrix(ctx, srcs, slices.Concat(dsts, srcs), 3))
	}
	return ms
}

// hybridRoles is what runs each hybrid node's pod network.
var hybridRoles = map[string]string{
	HybridFlannelNodes[0]: "flannel (vxlan) + vmlane --routes-only",
	HybridFlannelNodes[1]: "flannel (vxlan) + vmlane --routes-only",
	HybridVMNodes[0]:      "vmlane (DaemonSet), kube-proxy",
	HybridVMNodes[1]:      "vmlane (vmlaned outside Kubernetes, as on a Mac), no kube-proxy",
}

// Report writes the hybrid demo's account: the nodes and what runs their
// pod network, every node's IPv4 routing table (flannel's, vmlane's
// proto 77 routes and the Service route of the node without kube-proxy),
// what each VM's guest did from inside (its boot pings and fetches), and
// the matrix.
func (h *Hybrid) Report(w io.Writer, ms ...*Matrix) {
	section := section(w)
	section("Nodes")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tINTERNAL-IPS\tPOD-CIDRS\tVM-NODE LABEL\tPOD NETWORK")
	for _, n := range h.RealNodes {
		node, err := h.Client.CoreV1().Nodes().Get(context.Background(), n.Name, metav1.GetOptions{})
		if err != nil {
			fmt.Fprintf(tw, "%s\t%v\n", n.Name, err)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.Name, n.nodeIPs(), strings.Join(node.Spec.PodCIDRs, ","), node.Labels["vmlane.io/vm-node"], hybridRoles[n.Name])
	}
	tw.Flush()
	for _, v := range []struct{ title, ns string }{{"kubectl get pods -o wide", "default"}, {"kubectl -n vmlane-system get pods -o wide", "vmlane-system"}} {
		section(v.title)
		out, err := h.Kubectl("-n", v.ns, "get", "pods", "-o", "wide")
		if err != nil {
			out = err.Error()
		}
		fmt.Fprint(w, out)
	}
	section("Routes on each node (ip route; proto 77 are vmlane's, dev flannel.1 and flannel-v6.1 flannel's)")
	for _, n := range h.RealNodes {
		fmt.Fprintf(w, "%s:\n", n.Name)
		for _, family := range []string{"-4", "-6"} {
			out, err := n.Run("", "ip", family, "route", "show")
			if err != nil {
				out = err.Error()
			}
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				// The kernel's link-local routes say nothing here.
				if !strings.HasPrefix(l, "fe80::/64") && l != "" {
					fmt.Fprintf(w, "    %s\n", strings.TrimSpace(l))
				}
			}
		}
	}
	section("From inside the VMs (the guests' own reports at boot)")
	for _, name := range HybridVMs {
		vm := h.VMs[name]
		rep, err := h.GuestReport(name)
		if err != nil {
			fmt.Fprintf(w, "%s: %v\n", name, err)
			continue
		}
		for _, p := range rep.Pings {
			fmt.Fprintf(w, "%s (%s, %s) pinged %s: %d of %d answered\n", name, vm.IP, vm.Node, p.Target, p.Recv, p.Sent)
		}
		for _, f := range rep.Fetches {
			if f.OK {
				seen, backend, _ := strings.Cut(f.Body, "_")
				fmt.Fprintf(w, "%s (%s, %s) fetched %s: served by %s, which saw the request come from %s\n", name, vm.IP, vm.Node, f.URL, backend, seen)
			} else {
				fmt.Fprintf(w, "%s (%s, %s) fetched %s: failed: %s\n", name, vm.IP, vm.Node, f.URL, f.Err)
			}
		}
	}
	for i, m := range ms {
		if m == nil {
			continue
		}
		section(fmt.Sprintf("Ping matrix, %s (kubectl exec ping, average RTT of 3, from a web pod of each node)", []string{"IPv4", "IPv6"}[min(i, 1)]))
		m.Write(w)
		fmt.Fprintln(w, "Every cell also fetched /cgi-bin/whoami from the destination: it saw the source's own pod IP (no NAT between pods).")
	}
}

// GuestFailures lists what the VMs' guests reported failing: a ping with
// no answer, a failed fetch.
func (h *Hybrid) GuestFailures() []string {
	var out []string
	for _, name := range HybridVMs {
		rep, err := h.GuestReport(name)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		for _, p := range rep.Pings {
			if p.Recv != p.Sent || p.Sent == 0 {
				out = append(out, fmt.Sprintf("%s pinged %s: %d of %d answered", name, p.Target, p.Recv, p.Sent))
			}
		}
		for _, f := range rep.Fetches {
			if !f.OK {
				out = append(out, fmt.Sprintf("%s fetched %s: %s", name, f.URL, f.Err))
			}
		}
	}
	return out
}

package routes

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
)

// hybridNodes is a hybrid cluster: flannel nodes (Linux, Ready, not VM
// nodes), Linux and macOS VM nodes, and odd ones.
func hybridNodes() []Node {
	old := time.Now().Add(-time.Hour)
	return []Node{
		{Name: "flannel-1", PodCIDRs: pfx("10.244.0.0/24", "fd00:244::/64"), Addrs: addrs("192.168.1.10", "fd00::10"), Linux: true, Ready: true, Created: old},
		{Name: "flannel-2", PodCIDRs: pfx("10.244.1.0/24", "fd00:244:0:1::/64"), Addrs: addrs("192.168.1.11", "fd00::11"), Linux: true, Ready: true, Created: old},
		{Name: "flannel-3", PodCIDRs: pfx("10.244.2.0/24"), Addrs: addrs("192.168.1.12"), Linux: true, Created: old}, // NotReady
		{Name: "vm-linux", PodCIDRs: pfx("10.244.3.0/24", "fd00:244:0:3::/64"), Addrs: addrs("192.168.1.13", "fd00::13"), Linux: true, Ready: true, VM: true, Created: old},
		{Name: "vm-mac", PodCIDRs: pfx("10.244.4.0/24"), Addrs: addrs("192.168.1.14"), Ready: true, VM: true, Created: old},
		{Name: "vm-new", Addrs: addrs("192.168.1.15"), Linux: true, VM: true, Created: old}, // labelled, no podCIDRs
		{Name: "calico", Addrs: addrs("192.168.1.16"), Linux: true, Ready: true, Created: old},
	}
}

func desiredLines(d Desired) []string {
	var out []string
	for _, r := range d.Routes {
		out = append(out, r.Node+": "+r.String())
	}
	return out
}

func skipLines(d Desired) []string {
	var out []string
	for _, s := range d.Skips {
		out = append(out, fmt.Sprintf("%s %s: %s", s.Node, s.Dst, s.Reason))
	}
	return out
}

// TestComputeRoutesOnly: a routes-only node routes to VM nodes only, both
// families, keeps no NAT of its own pod subnet (flannel's), and says
// which VM node it cannot route to; nodes of its own CNI are not its
// business, with or without podCIDRs.
func TestComputeRoutesOnly(t *testing.T) {
	d := Compute(hybridNodes(), Policy{Self: "flannel-1", VMNodesOnly: true}).WithNAT(nil, true)
	want := []string{
		"vm-linux: 10.244.3.0/24 via 192.168.1.13",
		"vm-mac: 10.244.4.0/24 via 192.168.1.14",
		"vm-linux: fd00:244:0:3::/64 via fd00::13",
	}
	if diff := cmp.Diff(want, desiredLines(d)); diff != "" {
		t.Errorf("routes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"vm-new invalid Prefix: no podCIDRs"}, skipLines(d)); diff != "" {
		t.Errorf("skips (-want +got):\n%s", diff)
	}
	if len(d.Self) != 0 || len(d.NAT) != 0 {
		t.Errorf("routes-only node has NAT of its own: Self %v NAT %+v", d.Self, d.NAT)
	}
}

// TestComputeFullModeRoutesEveryNode: a VM node routes to every other
// node whatever its CNI, and its masquerade exemption covers them all.
func TestComputeFullModeRoutesEveryNode(t *testing.T) {
	d := Compute(hybridNodes(), Policy{Self: "vm-linux"}).WithNAT(nil, true)
	want := []string{
		"flannel-1: 10.244.0.0/24 via 192.168.1.10",
		"flannel-2: 10.244.1.0/24 via 192.168.1.11",
		"flannel-3: 10.244.2.0/24 via 192.168.1.12",
		"vm-mac: 10.244.4.0/24 via 192.168.1.14",
		"flannel-1: fd00:244::/64 via fd00::10",
		"flannel-2: fd00:244:0:1::/64 via fd00::11",
	}
	if diff := cmp.Diff(want, desiredLines(d)); diff != "" {
		t.Errorf("routes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"calico invalid Prefix: no podCIDRs", "vm-new invalid Prefix: no podCIDRs"}, skipLines(d)); diff != "" {
		t.Errorf("skips (-want +got):\n%s", diff)
	}
	if len(d.NAT) != 2 || !slices.Equal(d.NAT[0].Cluster, pfx("10.244.0.0/22", "10.244.4.0/24")) {
		t.Errorf("NAT %+v: want the exemption of 10.244.0.0/22 and 10.244.4.0/24 (every node's podCIDRs) and IPv6's", d.NAT)
	}
}

// TestServiceGateway: a node without kube-proxy routes each Service CIDR
// via one Ready Linux node that is not a VM node, the same one on every
// pass, another when that one goes, and says so when there is none.
func TestServiceGateway(t *testing.T) {
	svc := pfx("10.96.0.0/12", "fd00:96::/108")
	p := Policy{Self: "vm-mac", Services: svc, RouteServices: true}
	nodes := hybridNodes()
	d := Compute(nodes, p)
	if len(d.Gateways) != 2 {
		t.Fatalf("gateways %v, want one per family", d.Gateways)
	}
	gw := d.Gateways[0].Node
	if gw != "flannel-1" && gw != "flannel-2" {
		t.Fatalf("IPv4 gateway %s: want a Ready Linux node that is not a VM node", gw)
	}
	for _, r := range d.Gateways {
		if !strings.Contains(strings.Join(desiredLines(d), "\n"), r.Node+": "+r.String()) {
			t.Errorf("gateway route %s is not among the routes", r)
		}
	}
	for range 5 {
		if again := Compute(nodes, p); !cmp.Equal(again.Gateways, d.Gateways, cmp.Comparer(func(a, b Route) bool { return a == b })) {
			t.Fatalf("gateways changed between passes: %v, then %v", d.Gateways, again.Gateways)
		}
	}
	// Nodes spread over the gateways: rendezvous hashing gives some VM
	// node each of the three (calico's IPAM is its own business: it is
	// Linux and Ready, and runs kube-proxy like the others).
	seen := map[string]bool{}
	for i := range 40 {
		self := fmt.Sprintf("vm-%d", i)
		seen[Compute(append(nodes, Node{Name: self, VM: true}), Policy{Self: self, Services: svc[:1], RouteServices: true}).Gateways[0].Node] = true
	}
	if !seen["flannel-1"] || !seen["flannel-2"] || !seen["calico"] || len(seen) != 3 {
		t.Errorf("40 VM nodes chose gateways %v; want every Ready non-VM Linux node and no other", seen)
	}

	// The gateway goes NotReady: the other takes over.
	var rest []Node
	for _, n := range nodes {
		if n.Name == gw {
			n.Ready = false
		}
		rest = append(rest, n)
	}
	if d2 := Compute(rest, p); len(d2.Gateways) == 0 || d2.Gateways[0].Node == gw {
		t.Errorf("gateway %s went NotReady; gateways now %v", gw, d2.Gateways)
	}

	// No gateway at all: a skip on this node that names the CIDR.
	var none []Node
	for _, n := range nodes {
		if n.Linux && !n.VM {
			n.Ready = false
		}
		none = append(none, n)
	}
	d3 := Compute(none, p)
	if len(d3.Gateways) != 0 {
		t.Errorf("gateways %v with no Ready Linux node", d3.Gateways)
	}
	var msgs []string
	for _, s := range d3.Skips {
		if s.Node == "vm-mac" {
			msgs = append(msgs, s.Reason)
		}
	}
	if len(msgs) != 2 || !strings.Contains(msgs[0], "no Service gateway for 10.96.0.0/12") || !strings.Contains(msgs[0], "node vm-mac cannot reach Services") {
		t.Errorf("skips on vm-mac %q: want one per Service CIDR naming it and the node", msgs)
	}
}

// TestServicePathChains: the iptables rules of each role, as iptables -S
// prints them.
func TestServicePathChains(t *testing.T) {
	svc := pfx("10.96.0.0/12")
	for _, tc := range []struct {
		name string
		p    Policy
		want string
	}{
		{"routes-only gateway", Policy{Self: "flannel-1", VMNodesOnly: true, Services: svc}, `*filter -N FORWARD
*nat -N POSTROUTING
*nat -A POSTROUTING -m comment --comment vmlane: pod subnet NAT rules -j VMLANE-POSTROUTING
*nat -N VMLANE-POSTROUTING
*nat -A VMLANE-POSTROUTING -s 10.244.3.0/24 -m conntrack --ctstate DNAT --ctorigdst 10.96.0.0/12 -m comment --comment vmlane: Service gateway: 10.244.3.0/24 to Service network 10.96.0.0/12, masquerade -j MASQUERADE
*nat -A VMLANE-POSTROUTING -s 10.244.4.0/24 -m conntrack --ctstate DNAT --ctorigdst 10.96.0.0/12 -m comment --comment vmlane: Service gateway: 10.244.4.0/24 to Service network 10.96.0.0/12, masquerade -j MASQUERADE
`},
		{"node without kube-proxy", Policy{Self: "vm-linux", Services: svc, RouteServices: true}, `*filter -N FORWARD
*filter -A FORWARD -m comment --comment vmlane: pod subnet forwarding -j VMLANE-FORWARD
*filter -N VMLANE-FORWARD
*filter -A VMLANE-FORWARD -s 10.244.3.0/24 -m comment --comment vmlane: forward from pods -j ACCEPT
*filter -A VMLANE-FORWARD -d 10.244.3.0/24 -m comment --comment vmlane: forward to pods -j ACCEPT
*nat -N POSTROUTING
*nat -A POSTROUTING -m comment --comment vmlane: pod subnet NAT rules -j VMLANE-POSTROUTING
*nat -N VMLANE-POSTROUTING
*nat -A VMLANE-POSTROUTING -s 10.244.3.0/24 -d 10.244.0.0/22 -m comment --comment vmlane: pod to pod network 10.244.0.0/22, no NAT -j RETURN
*nat -A VMLANE-POSTROUTING -s 10.244.3.0/24 -d 10.244.4.0/24 -m comment --comment vmlane: pod to pod network 10.244.4.0/24, no NAT -j RETURN
*nat -A VMLANE-POSTROUTING -s 10.244.3.0/24 -d 10.96.0.0/12 -m comment --comment vmlane: pod to Service network 10.96.0.0/12 via a Service gateway, no NAT -j RETURN
*nat -A VMLANE-POSTROUTING -s 10.244.3.0/24 -m comment --comment vmlane: pod to outside, masquerade -j MASQUERADE
`},
		{"routes-only without --service-cidr", Policy{Self: "flannel-1", VMNodesOnly: true}, `*filter -N FORWARD
*nat -N POSTROUTING
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Compute(hybridNodes(), tc.p).WithNAT(nil, true)
			ipt := newFakeIPT()
			for _, o := range d.NAT {
				if o.family() != 0 {
					continue
				}
				if _, err := EnsureChains(ipt, Chains(o)); err != nil {
					t.Fatal(err)
				}
			}
			if diff := cmp.Diff(tc.want, ipt.String()); diff != "" {
				t.Errorf("iptables (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReconcileReportsOverlaps: a route of another owner that contains or
// is contained in a desired route is reported and left alone; the default
// route and host routes are not worth a word.
func TestReconcileReportsOverlaps(t *testing.T) {
	table := newFakeTable(
		"default via 192.168.1.1 dev eth0 proto 4",
		"10.244.3.64/26 dev cni9 proto 2",                // inside a VM node's podCIDR
		"10.244.0.0/16 via 192.168.1.1 dev eth0 proto 3", // around every podCIDR
		"10.244.4.7/32 via 192.168.1.1 dev eth0 proto 3", // a host route
	)
	want := []Route{
		{Dst: netip.MustParsePrefix("10.244.3.0/24"), Via: netip.MustParseAddr("192.168.1.13"), Node: "vm-linux"},
		{Dst: netip.MustParsePrefix("10.244.4.0/24"), Via: netip.MustParseAddr("192.168.1.14"), Node: "vm-mac"},
	}
	out, err := Reconcile(table, want, DefaultProtocol)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range out.Overlaps {
		got = append(got, o.Route.String()+" ~ "+o.Other.String())
	}
	wantOverlaps := []string{
		"10.244.3.0/24 via 192.168.1.13 ~ 10.244.0.0/16 via 192.168.1.1 dev eth0 proto 3",
		"10.244.3.0/24 via 192.168.1.13 ~ 10.244.3.64/26 dev cni9 proto 2",
		"10.244.4.0/24 via 192.168.1.14 ~ 10.244.0.0/16 via 192.168.1.1 dev eth0 proto 3",
	}
	if diff := cmp.Diff(wantOverlaps, slices.Sorted(slices.Values(got))); diff != "" {
		t.Errorf("overlaps (-want +got):\n%s", diff)
	}
	if !strings.Contains(table.String(), "10.244.3.64/26 dev cni9 proto 2") || !strings.Contains(table.String(), "10.244.0.0/16 via 192.168.1.1 dev eth0 proto 3") ||
		len(out.Installed) != 2 {
		t.Errorf("table after reconcile:\n%s\noutcome %+v", table, out)
	}
}

func hybridNode(name, ip, cidr string, labels map[string]string, age time.Duration) *corev1.Node {
	n := node(name, ip, cidr)
	if cidr == "" {
		n.Spec.PodCIDRs = nil
	}
	n.Labels = labels
	n.CreationTimestamp = metav1.NewTime(time.Now().Add(-age))
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	return n
}

// TestRoutesOnlyFollowsLabels: a routes-only controller over the fakes
// routes a node once it is labelled a VM node and withdraws the route
// when the label goes, leaving the other CNI's routes and iptables alone;
// and a labelled node without podCIDRs is reported once it is past the
// grace node IPAM needs, naming it.
func TestRoutesOnlyFollowsLabels(t *testing.T) {
	table := newFakeTable("10.244.1.0/24 via 10.244.1.0 dev flannel.1 proto 3", "10.244.0.0/24 dev cni0 proto 2")
	ipt := newFakeIPT()
	ipt.Append("nat", "POSTROUTING", "-s", "10.244.0.0/16", "-d", "10.244.0.0/16", "-j", "RETURN") // flannel's
	rec := record.NewFakeRecorder(10)
	c := NewController(fake.NewClientset(), table, ipt, nil, rec, NewMetrics(nil), slog.New(slog.DiscardHandler),
		Options{NodeName: "flannel-1", VMNodesOnly: true})
	linux := map[string]string{"kubernetes.io/os": "linux"}
	vm := map[string]string{"kubernetes.io/os": "linux", VMNodeLabel: "true"}
	apply := func(nodes ...*corev1.Node) {
		t.Helper()
		objs := make([]any, len(nodes))
		for i, n := range nodes {
			objs[i] = n
		}
		if err := c.informer.GetStore().Replace(objs, "1"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.loop.reconcile(true); err != nil {
			t.Fatal(err)
		}
	}
	foreign := "10.244.0.0/24 dev cni0 proto 2\n10.244.1.0/24 via 10.244.1.0 dev flannel.1 proto 3"
	iptBefore := ipt.String()

	apply(hybridNode("flannel-1", "192.168.1.10", "10.244.0.0/24", linux, time.Hour),
		hybridNode("flannel-2", "192.168.1.11", "10.244.1.0/24", linux, time.Hour),
		hybridNode("vm-1", "192.168.1.13", "10.244.3.0/24", linux, time.Hour))
	if got := table.String(); got != foreign {
		t.Errorf("before any label, table:\n%s\nwant only flannel's:\n%s", got, foreign)
	}
	apply(hybridNode("flannel-1", "192.168.1.10", "10.244.0.0/24", linux, time.Hour),
		hybridNode("flannel-2", "192.168.1.11", "10.244.1.0/24", linux, time.Hour),
		hybridNode("vm-1", "192.168.1.13", "10.244.3.0/24", vm, time.Hour),
		hybridNode("vm-2", "192.168.1.14", "", vm, time.Hour),
		hybridNode("vm-3", "192.168.1.15", "", vm, time.Second))
	if want := foreign + "\n10.244.3.0/24 via 192.168.1.13 proto 77"; table.String() != want {
		t.Errorf("labelled, table:\n%s\nwant:\n%s", table, want)
	}
	apply(hybridNode("flannel-1", "192.168.1.10", "10.244.0.0/24", linux, time.Hour),
		hybridNode("flannel-2", "192.168.1.11", "10.244.1.0/24", linux, time.Hour),
		hybridNode("vm-1", "192.168.1.13", "10.244.3.0/24", linux, time.Hour))
	if got := table.String(); got != foreign {
		t.Errorf("label removed, table:\n%s\nwant only flannel's:\n%s", got, foreign)
	}
	if got := ipt.String(); got != iptBefore {
		t.Errorf("routes-only without --service-cidr changed iptables:\n%s\nwas:\n%s", got, iptBefore)
	}
	close(rec.Events)
	var events []string
	for e := range rec.Events {
		events = append(events, e)
	}
	want := []string{"Warning VmlaneRouteSkipped node vm-2 is labelled vmlane.io/vm-node=true but has no podCIDRs: no route to it; a VM node needs podCIDRs from node IPAM (kube-controller-manager --allocate-node-cidrs)"}
	if diff := cmp.Diff(want, events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestChangesRoutes: which Node updates ask for a reconcile. Routes-only
// mode ignores nodes that are VM nodes neither before nor after (other
// than itself); full mode reads every node.
func TestChangesRoutes(t *testing.T) {
	linux := map[string]string{"kubernetes.io/os": "linux"}
	vm := map[string]string{"kubernetes.io/os": "linux", VMNodeLabel: "true"}
	node := func(name, ip string, labels map[string]string) *corev1.Node {
		return hybridNode(name, ip, "10.244.7.0/24", labels, time.Hour)
	}
	for _, tc := range []struct {
		name       string
		routesOnly bool
		a, b       *corev1.Node
		want       bool
	}{
		{"routes-only: another CNI's node moves", true, node("flannel-2", "192.168.1.11", linux), node("flannel-2", "192.168.1.99", linux), false},
		{"routes-only: a VM node moves", true, node("vm-1", "192.168.1.13", vm), node("vm-1", "192.168.1.99", vm), true},
		{"routes-only: a node becomes a VM node", true, node("vm-1", "192.168.1.13", linux), node("vm-1", "192.168.1.13", vm), true},
		{"routes-only: a node stops being one", true, node("vm-1", "192.168.1.13", vm), node("vm-1", "192.168.1.13", linux), true},
		{"routes-only: itself", true, node("flannel-1", "192.168.1.10", linux), node("flannel-1", "192.168.1.98", linux), true},
		{"routes-only: a heartbeat", true, node("vm-1", "192.168.1.13", vm), node("vm-1", "192.168.1.13", vm), false},
		{"full mode: any node moves", false, node("flannel-2", "192.168.1.11", linux), node("flannel-2", "192.168.1.99", linux), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewController(fake.NewClientset(), newFakeTable(), newFakeIPT(), nil, record.NewFakeRecorder(1), NewMetrics(nil), slog.New(slog.DiscardHandler),
				Options{NodeName: "flannel-1", VMNodesOnly: tc.routesOnly})
			if got := c.changesRoutes(tc.a, tc.b); got != tc.want {
				t.Errorf("changesRoutes = %v, want %v", got, tc.want)
			}
		})
	}
}

package routes

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func pfx(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, x := range s {
		out = append(out, netip.MustParsePrefix(x))
	}
	return out
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, x := range s {
		out = append(out, netip.MustParseAddr(x))
	}
	return out
}

func TestCompute(t *testing.T) {
	nodes := []Node{
		{Name: "a", PodCIDRs: pfx("10.244.0.0/24", "fd00:244::/64"), Addrs: addrs("192.168.1.10", "fd00::10")},
		{Name: "b", PodCIDRs: pfx("10.244.1.0/24", "fd00:244:0:1::/64"), Addrs: addrs("192.168.1.11", "fd00::11")},
		{Name: "c", PodCIDRs: pfx("10.244.2.0/24", "fd00:244:0:2::/64"), Addrs: addrs("192.168.1.12")}, // no IPv6 address
		{Name: "d", Addrs: addrs("192.168.1.13")},                                                      // no podCIDR yet
		{Name: "e", PodCIDRs: pfx("10.244.3.0/24"), Addrs: addrs("192.168.1.14")},
		{Name: "f", PodCIDRs: pfx("10.244.3.0/25"), Addrs: addrs("192.168.1.15")},   // overlaps e
		{Name: "g", PodCIDRs: pfx("10.244.0.128/25"), Addrs: addrs("192.168.1.16")}, // overlaps a, this node
	}
	got := Compute(nodes, Policy{Self: "a"})
	var routes, skips []string
	for _, r := range got.Routes {
		routes = append(routes, r.Node+": "+r.String())
	}
	for _, s := range got.Skips {
		skips = append(skips, fmt.Sprintf("%s %s: %s", s.Node, s.Dst, s.Reason))
	}
	wantRoutes := []string{
		"b: 10.244.1.0/24 via 192.168.1.11",
		"c: 10.244.2.0/24 via 192.168.1.12",
		"b: fd00:244:0:1::/64 via fd00::11",
	}
	wantSkips := []string{
		"c fd00:244:0:2::/64: no IPv6 address to route fd00:244:0:2::/64 via",
		"d invalid Prefix: no podCIDRs",
		"e 10.244.3.0/24: podCIDR 10.244.3.0/24 overlaps 10.244.3.0/25 of node f",
		"f 10.244.3.0/25: podCIDR 10.244.3.0/25 overlaps 10.244.3.0/24 of node e",
		"g 10.244.0.128/25: podCIDR 10.244.0.128/25 overlaps 10.244.0.0/24 of node a",
	}
	if diff := cmp.Diff(wantRoutes, routes); diff != "" {
		t.Errorf("routes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantSkips, skips); diff != "" {
		t.Errorf("skips (-want +got):\n%s", diff)
	}
	if len(got.Self) != 2 || len(got.PodCIDRs) != 9 {
		t.Errorf("Self %v, PodCIDRs %v", got.Self, got.PodCIDRs)
	}
}

func TestReconcile(t *testing.T) {
	const p = DefaultProtocol
	table := newFakeTable(
		"default via 192.168.1.1 dev eth0 proto 4",
		"192.168.1.0/24 dev eth0 proto 2",
		"10.244.9.0/24 via 192.168.1.19 proto 77", // stale: node gone while down
		"10.244.1.0/24 via 192.168.1.99 proto 77", // next hop changed
		"10.244.5.0/24 via 192.168.1.50 proto 12", // foreign (bird) for a wanted dst
	)
	table.gateways[netip.MustParseAddr("10.0.0.7")] = netip.MustParseAddr("192.168.1.1")
	want := []Route{
		{Dst: netip.MustParsePrefix("10.244.1.0/24"), Via: netip.MustParseAddr("192.168.1.11"), Node: "b"},
		{Dst: netip.MustParsePrefix("10.244.2.0/24"), Via: netip.MustParseAddr("192.168.1.12"), Node: "c"},
		{Dst: netip.MustParsePrefix("10.244.5.0/24"), Via: netip.MustParseAddr("192.168.1.15"), Node: "e"},
		{Dst: netip.MustParsePrefix("10.244.6.0/24"), Via: netip.MustParseAddr("10.0.0.7"), Node: "far"},
	}
	out, err := Reconcile(table, want, p)
	if err != nil {
		t.Fatal(err)
	}
	wantTable := strings.Join([]string{
		"10.244.1.0/24 via 192.168.1.11 proto 77",
		"10.244.2.0/24 via 192.168.1.12 proto 77",
		"10.244.5.0/24 via 192.168.1.50 proto 12",
		"192.168.1.0/24 dev eth0 proto 2",
		"default via 192.168.1.1 dev eth0 proto 4",
	}, "\n")
	if diff := cmp.Diff(wantTable, table.String()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
	if len(out.Installed) != 2 || len(out.Deleted) != 1 || len(out.Unreachable) != 1 || len(out.Foreign) != 1 || out.Owned != 2 {
		t.Errorf("outcome %+v", out)
	}
	// A second pass changes nothing; it only tries the unreachable route
	// again (the kernel is the judge of reachability).
	table.calls = nil
	before := table.String()
	out, err = Reconcile(table, want, p)
	if err != nil || out.Owned != 2 || table.String() != before ||
		len(table.calls) != 1 || table.calls[0] != "replace 10.244.6.0/24 via 10.0.0.7 proto 77" {
		t.Errorf("second reconcile: calls %v, outcome %+v, err %v", table.calls, out, err)
	}
}

// TestReconcileNoRouteToNextHop: a next hop the kernel has no route to at
// all (a node with no default route, a node on a foreign subnet) is
// unreachable, like one behind a gateway: skipped and reported, not an
// error that would fail every reconcile and, after three resyncs, the
// health check.
func TestReconcileNoRouteToNextHop(t *testing.T) {
	table := newFakeTable()
	table.noRoute = map[netip.Addr]bool{netip.MustParseAddr("172.31.0.9"): true}
	want := []Route{
		{Dst: netip.MustParsePrefix("10.244.1.0/24"), Via: netip.MustParseAddr("192.168.1.11")},
		{Dst: netip.MustParsePrefix("10.244.7.0/24"), Via: netip.MustParseAddr("172.31.0.9")},
	}
	out, err := Reconcile(table, want, DefaultProtocol)
	if err != nil {
		t.Fatalf("reconcile failed over an unroutable next hop: %v", err)
	}
	if len(out.Installed) != 1 || len(out.Unreachable) != 1 || out.Unreachable[0].Via.String() != "172.31.0.9" {
		t.Errorf("outcome %+v, want one installed and 172.31.0.9 unreachable", out)
	}
}

func TestReconcileKeepsGoingAfterErrors(t *testing.T) {
	table := newFakeTable("10.244.9.0/24 via 192.168.1.19 proto 77")
	table.failOn = "replace 10.244.1.0/24"
	want := []Route{
		{Dst: netip.MustParsePrefix("10.244.1.0/24"), Via: netip.MustParseAddr("192.168.1.11")},
		{Dst: netip.MustParsePrefix("10.244.2.0/24"), Via: netip.MustParseAddr("192.168.1.12")},
	}
	out, err := Reconcile(table, want, DefaultProtocol)
	if err == nil || !strings.Contains(err.Error(), "adding route 10.244.1.0/24 via 192.168.1.11") {
		t.Fatalf("err = %v", err)
	}
	if len(out.Installed) != 1 || len(out.Deleted) != 1 {
		t.Errorf("outcome %+v: the other route and the sweep must still happen", out)
	}
}

// TestReconcileOrderIndependent replays random desired states in shuffled
// order: whatever the history, the table ends as the last state asks.
func TestReconcileOrderIndependent(t *testing.T) {
	var states [][]Route
	for i := range 6 {
		var s []Route
		for j := range 5 {
			if (i+j)%3 != 0 {
				s = append(s, Route{
					Dst: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(j), 0}), 24),
					Via: netip.AddrFrom4([4]byte{192, 168, 1, byte(10 + (i+j)%4)}),
				})
			}
		}
		states = append(states, s)
	}
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 1))
		table := newFakeTable("192.168.1.0/24 dev eth0 proto 2", "10.99.0.0/24 via 192.168.1.5 proto 9")
		order := r.Perm(len(states))
		for _, i := range order {
			if _, err := Reconcile(table, states[i], DefaultProtocol); err != nil {
				t.Fatal(err)
			}
		}
		last := states[order[len(order)-1]]
		fresh := newFakeTable("192.168.1.0/24 dev eth0 proto 2", "10.99.0.0/24 via 192.168.1.5 proto 9")
		Reconcile(fresh, last, DefaultProtocol)
		if diff := cmp.Diff(fresh.String(), table.String()); diff != "" {
			t.Fatalf("seed %d order %v: table depends on history (-fresh +replayed):\n%s", seed, order, diff)
		}
	}
}

func TestChainsAndEnsure(t *testing.T) {
	chains := Chains(NATOptions{
		PodCIDR:    netip.MustParsePrefix("10.244.1.0/24"),
		Cluster:    pfx("10.244.0.0/16"),
		Masquerade: true,
	})
	ipt := newFakeIPT()
	ipt.Append("nat", "POSTROUTING", "-s", "172.17.0.0/16", "-j", "MASQUERADE") // docker's, foreign
	changed, err := EnsureChains(ipt, chains)
	if err != nil || !changed {
		t.Fatalf("first EnsureChains = %v, %v", changed, err)
	}
	want := `*filter -N FORWARD
*filter -A FORWARD -m comment --comment vmlane: pod subnet forwarding -j VMLANE-FORWARD
*filter -N VMLANE-FORWARD
*filter -A VMLANE-FORWARD -s 10.244.1.0/24 -m comment --comment vmlane: forward from pods -j ACCEPT
*filter -A VMLANE-FORWARD -d 10.244.1.0/24 -m comment --comment vmlane: forward to pods -j ACCEPT
*nat -N POSTROUTING
*nat -A POSTROUTING -m comment --comment vmlane: pod subnet NAT rules -j VMLANE-POSTROUTING
*nat -A POSTROUTING -s 172.17.0.0/16 -j MASQUERADE
*nat -N VMLANE-POSTROUTING
*nat -A VMLANE-POSTROUTING -s 10.244.1.0/24 -d 10.244.0.0/16 -m comment --comment vmlane: pod to pod network 10.244.0.0/16, no NAT -j RETURN
*nat -A VMLANE-POSTROUTING -s 10.244.1.0/24 -m comment --comment vmlane: pod to outside, masquerade -j MASQUERADE
`
	if diff := cmp.Diff(want, ipt.String()); diff != "" {
		t.Errorf("iptables (-want +got):\n%s", diff)
	}
	if changed, err := EnsureChains(ipt, chains); changed || err != nil {
		t.Errorf("second EnsureChains = %v, %v; want no change", changed, err)
	}
	// A rule deleted by hand: the chain is replaced whole, in order.
	ipt.Delete("nat", ChainNAT, chains[0].Rules[0]...)
	if changed, _ := EnsureChains(ipt, chains); !changed {
		t.Error("a missing rule was not restored")
	}
	if diff := cmp.Diff(want, ipt.String()); diff != "" {
		t.Errorf("after repair (-want +got):\n%s", diff)
	}
	// A stray rule in our chain is removed too.
	ipt.Append("filter", ChainForward, "-j", "DROP")
	EnsureChains(ipt, chains)
	if diff := cmp.Diff(want, ipt.String()); diff != "" {
		t.Errorf("after stray rule (-want +got):\n%s", diff)
	}
	if err := RemoveChains(ipt, chains); err != nil {
		t.Fatal(err)
	}
	if got := ipt.String(); got != "*filter -N FORWARD\n*nat -N POSTROUTING\n*nat -A POSTROUTING -s 172.17.0.0/16 -j MASQUERADE\n" {
		t.Errorf("after RemoveChains:\n%s", got)
	}
}

func TestChainsWithoutMasquerade(t *testing.T) {
	c := Chains(NATOptions{PodCIDR: netip.MustParsePrefix("10.244.1.0/24"), Cluster: pfx("10.244.0.0/24", "10.244.1.0/24")})
	if n := len(c[0].Rules); n != 2 {
		t.Errorf("nat rules = %d, want 2 RETURN and no MASQUERADE", n)
	}
	for _, r := range c[0].Rules {
		if strings.Contains(strings.Join(r, " "), "MASQUERADE") {
			t.Errorf("masquerade rule with Masquerade off: %v", r)
		}
	}
}

func TestTeardown(t *testing.T) {
	table := newFakeTable("default via 192.168.1.1 dev eth0 proto 4", "10.244.1.0/24 via 192.168.1.11 proto 77", "10.244.9.0/24 via 192.168.1.9 proto 12")
	ipt := newFakeIPT()
	EnsureChains(ipt, Chains(NATOptions{PodCIDR: netip.MustParsePrefix("10.244.0.0/24"), Cluster: pfx("10.244.0.0/16"), Masquerade: true}))
	removed, err := Teardown(table, []iptablesInterface{ipt, nil}, DefaultProtocol)
	if err != nil || len(removed) != 1 {
		t.Fatalf("Teardown = %v, %v", removed, err)
	}
	if diff := cmp.Diff("10.244.9.0/24 via 192.168.1.9 proto 12\ndefault via 192.168.1.1 dev eth0 proto 4", table.String()); diff != "" {
		t.Errorf("routes after teardown (-want +got):\n%s", diff)
	}
	if got := ipt.String(); got != "*filter -N FORWARD\n*nat -N POSTROUTING\n" {
		t.Errorf("iptables after teardown:\n%s", got)
	}
}

func TestAggregate(t *testing.T) {
	var many []netip.Prefix
	for i := range 5000 {
		many = append(many, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(128 + i/256), byte(i % 256), 0}), 24))
	}
	got := Aggregate(many)
	// 5,000 = 4096 + 512 + 256 + 128 + 8 /24s from 10.128.0.0.
	want := pfx("10.128.0.0/12", "10.144.0.0/15", "10.146.0.0/16", "10.147.0.0/17", "10.147.128.0/21")
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("Aggregate(5000 /24s) (-want +got):\n%s", diff)
	}
	for _, tc := range []struct{ in, want []netip.Prefix }{
		{pfx("10.0.0.0/24", "10.0.1.0/24"), pfx("10.0.0.0/23")},
		{pfx("10.0.1.0/24", "10.0.2.0/24"), pfx("10.0.1.0/24", "10.0.2.0/24")}, // not siblings
		{pfx("10.0.0.0/16", "10.0.5.0/24"), pfx("10.0.0.0/16")},
		{pfx("fd00::/64", "fd00:0:0:1::/64", "10.0.0.0/24"), pfx("10.0.0.0/24", "fd00::/63")},
		{nil, []netip.Prefix{}},
	} {
		if diff := cmp.Diff(tc.want, Aggregate(tc.in), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
			t.Errorf("Aggregate(%v) (-want +got):\n%s", tc.in, diff)
		}
	}
}

// TestEnsureChainsRestoresInOneExec: whatever is broken, a reconcile
// replaces the broken chains in one iptables-restore, and an intact set
// costs none.
func TestEnsureChainsRestoresInOneExec(t *testing.T) {
	chains := Chains(NATOptions{PodCIDR: netip.MustParsePrefix("10.244.1.0/24"), Cluster: pfx("10.244.0.0/16"), Masquerade: true})
	ipt := newFakeIPT()
	EnsureChains(ipt, chains)
	ipt.Delete("nat", ChainNAT, chains[0].Rules[1]...)
	ipt.Append("filter", ChainForward, "-j", "DROP")
	before := ipt.restores
	if changed, err := EnsureChains(ipt, chains); !changed || err != nil {
		t.Fatalf("EnsureChains = %v, %v", changed, err)
	}
	if n := ipt.restores - before; n != 1 {
		t.Errorf("%d iptables-restore execs to repair two chains, want 1", n)
	}
	before = ipt.restores
	EnsureChains(ipt, chains)
	if n := ipt.restores - before; n != 0 {
		t.Errorf("%d iptables-restore execs with every chain intact, want 0", n)
	}
}

func TestRestoreInput(t *testing.T) {
	chains := Chains(NATOptions{PodCIDR: netip.MustParsePrefix("10.244.1.0/24"), Cluster: pfx("10.244.0.0/16"), Masquerade: true})
	want := `*nat
:VMLANE-POSTROUTING - [0:0]
-A VMLANE-POSTROUTING -s 10.244.1.0/24 -d 10.244.0.0/16 -m comment --comment "vmlane: pod to pod network 10.244.0.0/16, no NAT" -j RETURN
-A VMLANE-POSTROUTING -s 10.244.1.0/24 -m comment --comment "vmlane: pod to outside, masquerade" -j MASQUERADE
COMMIT
*filter
:VMLANE-FORWARD - [0:0]
-A VMLANE-FORWARD -s 10.244.1.0/24 -m comment --comment "vmlane: forward from pods" -j ACCEPT
-A VMLANE-FORWARD -d 10.244.1.0/24 -m comment --comment "vmlane: forward to pods" -j ACCEPT
COMMIT
`
	if diff := cmp.Diff(want, string(RestoreInput(chains))); diff != "" {
		t.Errorf("restore input (-want +got):\n%s", diff)
	}
	for _, arg := range []string{"plain", "two words", `a "quoted" word`, `back\slash`, "", "tab\there"} {
		got, err := splitRestore("X " + restoreQuote(arg) + " Y")
		if err != nil || len(got) != 3 || got[1] != arg {
			t.Errorf("restoreQuote(%q) splits back as %q, %v", arg, got, err)
		}
	}
}

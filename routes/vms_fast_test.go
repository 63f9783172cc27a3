package routes

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// ownedFake is a fakeTable that tells another owner's route apart, as the
// kernel table does (ReplaceOwned).
type ownedFake struct{ *fakeTable }

func (f ownedFake) ReplaceOwned(dst netip.Prefix, via netip.Addr, proto int) error {
	f.calls = append(f.calls, fmt.Sprintf("replace-owned %s via %s", dst, via))
	if have, ok := f.routes[dst]; ok && have.Proto != proto {
		return fmt.Errorf("%w: %s", errForeign, have)
	}
	return f.Replace(dst, via, proto)
}

// threeNodes is a controller with options o over a table that tells
// another owner's route apart, and Nodes a, b and c (192.168.1.1–3, pod
// subnets 10.244.0–2.0/24) in its cache.
func threeNodes(t *testing.T, o Options) (*Controller, ownedFake) {
	t.Helper()
	table := ownedFake{newFakeTable()}
	c := NewController(fake.NewClientset(), table, nil, nil, nil, NewMetrics(nil), slog.New(slog.DiscardHandler), o)
	var objs []any
	for i, n := range []string{"a", "b", "c"} {
		objs = append(objs, node(n, fmt.Sprintf("192.168.1.%d", i+1), fmt.Sprintf("10.244.%d.0/24", i)))
	}
	if err := c.informer.GetStore().Replace(objs, "1"); err != nil {
		t.Fatal(err)
	}
	return c, table
}

// TestMoveVMsWithoutAReconcile: a VM whose claim names another node has its
// host route moved by SetVMs itself, with no reconcile; a VM back home or
// here loses it the same way; another owner's route to the VM, a burst of
// moves, VMs that went, a VM on an unknown node and a controller before
// its first reconcile are left to a reconcile.
func TestMoveVMsWithoutAReconcile(t *testing.T) {
	c, table := threeNodes(t, Options{NodeName: "a"})
	web := func(node string) VM {
		return VM{Name: "default/web", Node: node, Addrs: []netip.Addr{netip.MustParseAddr("10.244.1.9")}}
	}
	calls := func() string {
		defer func() { table.calls = nil }()
		var out []string
		for _, call := range table.calls {
			if !strings.HasPrefix(call, "replace 10.244.0.0/24") && !strings.HasPrefix(call, "replace 10.244.1.0/24") && !strings.HasPrefix(call, "replace 10.244.2.0/24") {
				out = append(out, call)
			}
		}
		return strings.Join(out, "; ")
	}

	triggered := func() bool { return reconcileAsked(c) }

	// Before the first reconcile the table is the early phase's.
	c.SetVMs([]VM{web("c")})
	if got := calls(); got != "" || !triggered() {
		t.Errorf("before the first reconcile: %q, want nothing but a reconcile", got)
	}
	if _, err := c.loop.reconcile(true); err != nil {
		t.Fatal(err)
	}
	table.calls = nil

	c.SetVMs([]VM{web("b")}) // back home: the /32 via c goes
	if got, want := calls(), "del 10.244.1.9/32 proto 77"; got != want || triggered() {
		t.Errorf("a VM back home: %q, want %q and no reconcile", got, want)
	}
	c.SetVMs([]VM{web("c")})
	if got, want := calls(), "replace-owned 10.244.1.9/32 via 192.168.1.3; replace 10.244.1.9/32 via 192.168.1.3 proto 77"; got != want || triggered() {
		t.Errorf("a VM moved to c: %q, want %q and no reconcile", got, want)
	}
	c.SetVMs([]VM{web("c")}) // unchanged
	if got := calls(); got != "" {
		t.Errorf("unchanged: %q", got)
	}
	c.SetVMs([]VM{web("a")}) // here: no route (the plugin's host route is on the bridge)
	if got, want := calls(), "del 10.244.1.9/32 proto 77"; got != want {
		t.Errorf("a VM moved here: %q, want %q", got, want)
	}

	// A route the reconcile put through the tunnel (or the fabric) has
	// another next hop than c's address: it goes all the same when the
	// VM comes home. (Deleted by c's address, the kernel found no such
	// route, which counted as done: the route stayed until a resync.)
	host := netip.MustParsePrefix("10.244.1.9/32")
	c.SetVMs([]VM{web("c")})
	table.routes[host] = KernelRoute{Dst: host, Via: netip.MustParseAddr("10.244.2.0"), Dev: DefaultVXLANDevice, Proto: 77}
	calls()
	c.SetVMs([]VM{web("b")})
	if r, ok := table.routes[host]; ok || triggered() {
		t.Errorf("a VM back home from a node through the tunnel: its route %v stayed (reconcile asked: %v)", r, triggered())
	}
	calls()

	// Another owner's route to the VM's address stays.
	table.routes[netip.MustParsePrefix("10.244.1.9/32")] = KernelRoute{Dst: netip.MustParsePrefix("10.244.1.9/32"), Dev: "vmlane0", Proto: 78}
	c.SetVMs([]VM{web("c")})
	if got, want := calls(), "replace-owned 10.244.1.9/32 via 192.168.1.3"; got != want || table.routes[netip.MustParsePrefix("10.244.1.9/32")].Proto != 78 || !triggered() {
		t.Errorf("another owner's route: %q (want %q, and a reconcile), the route now %v", got, want, table.routes[netip.MustParsePrefix("10.244.1.9/32")])
	}

	// A burst is the reconcile's.
	var burst []VM
	for i := range moveFastMax + 1 {
		burst = append(burst, VM{Name: fmt.Sprintf("default/vm-%d", i), Node: "c", Addrs: []netip.Addr{netip.AddrFrom4([4]byte{10, 244, 1, byte(10 + i)})}})
	}
	c.SetVMs(slices.Concat([]VM{web("c")}, burst))
	if got := calls(); got != "" || !triggered() {
		t.Errorf("%d VMs at once: %q, want nothing but a reconcile", len(burst), got)
	}
	// VMs that went are the reconcile's (it deletes their routes).
	c.SetVMs([]VM{web("c")})
	if got := calls(); got != "" || !triggered() {
		t.Errorf("VMs that went: %q, want nothing but a reconcile", got)
	}
	// A VM on a node not in the cache: said by the reconcile.
	c.SetVMs([]VM{web("c"), {Name: "default/lost", Node: "gone", Addrs: []netip.Addr{netip.MustParseAddr("10.244.1.20")}}})
	if !triggered() {
		t.Error("a VM on a node not in the cache: no reconcile")
	}
}

// TestMoveVMsAnnounces: in --cross-subnet=bgp a move of a VM to or from
// this node is announced at once, without a reconcile: a VM that moved
// here is added to the node's pod subnets, and withdrawn once it moved
// on, also to a node the fabric reaches (whose route the reconcile makes).
// (It waited for a reconcile, which at 5,000 Nodes is 60 ms.) Moves
// between other nodes announce nothing; nothing is announced before the
// first reconcile.
func TestMoveVMsAnnounces(t *testing.T) {
	ann := &recordingAnnouncer{}
	c, table := threeNodes(t, Options{NodeName: "a", CrossSubnet: CrossSubnetBGP, Announcer: ann})
	// Node far is behind a router: the kernel refuses it as a next hop.
	if err := c.informer.GetStore().Add(node("far", "192.168.9.9", "10.244.9.0/24")); err != nil {
		t.Fatal(err)
	}
	table.gateways[netip.MustParseAddr("192.168.9.9")] = netip.MustParseAddr("192.168.1.254")
	web := func(node string) []VM {
		return []VM{
			{Name: "default/db", Node: "a", Addrs: []netip.Addr{netip.MustParseAddr("10.244.2.7")}},
			{Name: "default/web", Node: node, Addrs: []netip.Addr{netip.MustParseAddr("10.244.1.9")}},
		}
	}
	c.SetVMs(web("b"))
	if ann.last != nil || !reconcileAsked(c) {
		t.Fatalf("before the first reconcile: announced %v, want nothing but a reconcile", ann.last)
	}
	if _, err := c.loop.reconcile(true); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(ann.last), "[10.244.0.0/24 10.244.2.7/32]"; got != want {
		t.Fatalf("after the first reconcile: announced %s, want %s", got, want)
	}

	here, gone := "[10.244.0.0/24 10.244.1.9/32 10.244.2.7/32]", "[10.244.0.0/24 10.244.2.7/32]"
	for _, step := range []struct {
		on, want  string
		reconcile bool // the route is the reconcile's
	}{
		{on: "a", want: here},
		{on: "c", want: gone},
		{on: "a", want: here},
		{on: "b", want: gone}, // home
		{on: "c", want: "nothing"},
		{on: "b", want: "nothing"},
		{on: "a", want: here},
		{on: "far", want: gone, reconcile: true},
	} {
		ann.last = nil
		c.SetVMs(web(step.on))
		got := "nothing"
		if ann.last != nil {
			got = fmt.Sprint(ann.last)
		}
		if asked := reconcileAsked(c); got != step.want || asked != step.reconcile {
			t.Errorf("VM moved to %s: announced %s (a reconcile asked: %v), want %s (%v)", step.on, got, asked, step.want, step.reconcile)
		}
	}
	ann.last = nil
	if _, err := c.loop.reconcile(false); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(ann.last), gone; got != want {
		t.Errorf("the next reconcile: announced %s, want %s", got, want)
	}
}

// TestApplyNeedsAnOwnedReplacer: a table that cannot tell another owner's
// route (the macOS one) gets no fast path.
func TestApplyNeedsAnOwnedReplacer(t *testing.T) {
	f := newFakeTable()
	l := &Loop{Table: f, Proto: DefaultProtocol}
	l.Init()
	if n := l.Apply([]Route{{Dst: netip.MustParsePrefix("10.244.1.9/32"), Via: netip.MustParseAddr("192.168.1.3")}}, nil); n != 0 || len(f.calls) != 0 {
		t.Errorf("Apply on a plain table: %d routes, calls %q", n, f.calls)
	}
}

// TestPodCIDRsFollowTheNodes: PodCIDRs lists every Node's pod subnets, and
// lists them again once a Node changed in a way routes read (the Nodes'
// generation), not before.
func TestPodCIDRsFollowTheNodes(t *testing.T) {
	c := NewController(fake.NewClientset(), ownedFake{newFakeTable()}, nil, nil, nil, NewMetrics(nil), slog.New(slog.DiscardHandler), Options{NodeName: "a"})
	set := func(nodes ...*corev1.Node) {
		objs := make([]any, len(nodes))
		for i, n := range nodes {
			objs[i] = n
		}
		if err := c.informer.GetStore().Replace(objs, "1"); err != nil {
			t.Fatal(err)
		}
	}
	got := func() []string {
		var out []string
		for _, p := range c.PodCIDRs() {
			out = append(out, p.String())
		}
		slices.Sort(out)
		return out
	}
	a, b := node("a", "192.168.1.1", "10.244.0.0/24"), node("b", "192.168.1.2", "10.244.1.0/24")
	set(a, b)
	if g, want := got(), []string{"10.244.0.0/24", "10.244.1.0/24"}; !slices.Equal(g, want) {
		t.Errorf("PodCIDRs %v, want %v", g, want)
	}
	set(a, b, node("c", "192.168.1.3", "10.244.2.0/24"))
	if g, want := got(), []string{"10.244.0.0/24", "10.244.1.0/24"}; !slices.Equal(g, want) {
		t.Errorf("PodCIDRs %v before the Nodes' generation changed, want the list it had %v", g, want)
	}
	c.nodesGen.Add(1) // what the informer's handler does for the new Node
	if g, want := got(), []string{"10.244.0.0/24", "10.244.1.0/24", "10.244.2.0/24"}; !slices.Equal(g, want) {
		t.Errorf("PodCIDRs %v, want %v", g, want)
	}
}

// TestChangedVMs: changedVMs's walk of two lists sorted by name finds the
// same new and changed VMs as a map of the old list would, and refuses VMs
// that went and bursts alike; SetVMs sorts what it is given, so a list out
// of order moves the same routes.
func TestChangedVMs(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	mk := func(n int) []VM {
		var vms []VM
		for i := range n {
			if rng.IntN(5) == 0 {
				continue
			}
			vms = append(vms, VM{Name: fmt.Sprintf("default/vm-%03d", i), Node: fmt.Sprintf("n%d", rng.IntN(3)),
				Addrs: []netip.Addr{netip.AddrFrom4([4]byte{10, 244, 1, byte(i)})}})
		}
		return vms
	}
	names := func(vms []VM) []string {
		var out []string
		for _, v := range vms {
			out = append(out, v.Name+"@"+v.Node)
		}
		slices.Sort(out)
		return out
	}
	// byMap is the reference: old through a map, vms in any order.
	byMap := func(old, vms []VM) (now, was []VM, ok bool) {
		before := make(map[string]VM, len(old))
		for _, v := range old {
			before[v.Name] = v
		}
		for _, v := range vms {
			o, found := before[v.Name]
			delete(before, v.Name)
			if found && sameVM(o, v) {
				continue
			}
			if len(now) == moveFastMax {
				return nil, nil, false
			}
			now = append(now, v)
			if found {
				was = append(was, o)
			}
		}
		return now, was, len(before) == 0
	}
	for step := range 500 {
		n := 1 + rng.IntN(100)
		old, vms := mk(n), mk(n)
		if rng.IntN(2) == 0 { // mostly the same, as at a move
			vms = slices.Clone(old)
			for range rng.IntN(3) {
				if len(vms) > 0 {
					vms[rng.IntN(len(vms))].Node = "moved"
				}
			}
		}
		now, was, ok := changedVMs(old, vms)
		so, sv := slices.Clone(old), slices.Clone(vms)
		rng.Shuffle(len(so), func(i, j int) { so[i], so[j] = so[j], so[i] })
		rng.Shuffle(len(sv), func(i, j int) { sv[i], sv[j] = sv[j], sv[i] })
		now2, was2, ok2 := byMap(so, sv)
		if ok != ok2 || ok && (!slices.Equal(names(now), names(now2)) || !slices.Equal(names(was), names(was2))) {
			t.Fatalf("step %d: the walk %v %v %v, the map %v %v %v", step, names(now), names(was), ok, names(now2), names(was2), ok2)
		}
		gone := false
		for _, o := range old {
			gone = gone || !slices.ContainsFunc(vms, func(v VM) bool { return v.Name == o.Name })
		}
		if gone && ok {
			t.Fatalf("step %d: VMs went and changedVMs said ok", step)
		}
	}

	// SetVMs given a list out of order keeps it sorted: the next change
	// is found by the walk.
	c := NewController(fake.NewClientset(), ownedFake{newFakeTable()}, nil, nil, nil, NewMetrics(nil), slog.New(slog.DiscardHandler), Options{NodeName: "a"})
	vms := mk(20)
	shuffled := slices.Clone(vms)
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	c.SetVMs(shuffled)
	if got := c.vmList(); !slices.IsSortedFunc(got, vmByName) || !slices.Equal(names(got), names(vms)) {
		t.Errorf("SetVMs of a shuffled list kept %v, want %v sorted", names(got), names(vms))
	}
}

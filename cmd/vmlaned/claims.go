package main

// VMClaims: the cluster-wide record of which VM holds which addresses and
// where it runs (vmlane.io/v1alpha1, kind VMClaim, one per VM, named and
// namespaced as the VM). A node's vmlaned publishes its VM leases as
// claims (claims_linux.go runs it); this file is the pure part: what the
// claims should say, given the node's leases and the claims as they are.

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/vmlane/vmlane/leases"
	"github.com/vmlane/vmlane/plugin"
)

// claimStatus is a VMClaim's status, as vmlaned writes it.
type claimStatus struct {
	// IPv4 and IPv6 are the VM's addresses with the prefix length of the
	// pod subnet they belong to ("10.244.1.5/24"), as IPAMClaim's
	// status.ips spells them; IPv6 is empty on an IPv4-only node.
	IPv4 string `json:"ipv4"`
	IPv6 string `json:"ipv6,omitempty"`
	MAC  string `json:"mac"`
	// Node is where the VM's addresses are held: the node its pod runs
	// on, or the node its last pod ran on. Pod is "NAMESPACE/NAME" of the
	// VM's pod there, empty while none is (HeldUntil says until when).
	Node      string `json:"node"`
	Pod       string `json:"pod,omitempty"`
	HeldUntil string `json:"heldUntil,omitempty"`
	// Home is the node whose pod subnets the addresses are of, which
	// created the claim (the admission policy holds a node to its own
	// name at creation and the name ever after); empty in a claim from
	// before it.
	Home string `json:"home,omitempty"`
}

// claim is a VMClaim as the publisher sees it: its identity, status and
// the resourceVersion an update or delete is made against.
type claim struct {
	VM              string // NAMESPACE/NAME
	Status          claimStatus
	ResourceVersion string
	// Created is the claim's metadata.creationTimestamp: of two claims
	// that name one address or MAC, the older holds it (clashes).
	Created time.Time
}

// claimAction is one API call the publisher makes.
type claimAction struct {
	Op     string // "create", "update" or "delete"
	VM     string
	Status claimStatus
	// ResourceVersion makes update and delete conditional on the claim
	// being as it was read.
	ResourceVersion string
}

func (a claimAction) String() string {
	if a.Op == "delete" {
		return a.Op + " " + a.VM
	}
	return fmt.Sprintf("%s %s %s %s %s node=%s pod=%s held=%s", a.Op, a.VM, a.Status.IPv4, a.Status.IPv6, a.Status.MAC, a.Status.Node, a.Status.Pod, a.Status.HeldUntil)
}

// claimConflict is a VM whose lease on this node and claim disagree on its
// addresses: two nodes allocated for a new VM at once, or a claim someone
// edited. The claim stays as it is.
type claimConflict struct {
	VM           string
	Lease, Claim claimStatus
}

func (c claimConflict) String() string {
	return fmt.Sprintf("VM %s: this node's lease holds %s %s %s, its VMClaim says %s %s %s (node %s)",
		c.VM, c.Lease.IPv4, c.Lease.IPv6, c.Lease.MAC, c.Claim.IPv4, c.Claim.IPv6, c.Claim.MAC, c.Claim.Node)
}

// leaseClaims is what this node's VM leases say the claims are.
func leaseClaims(f *leases.File, node string) map[string]claimStatus {
	out := map[string]claimStatus{}
	for _, l := range f.Leases {
		if l.VMName == "" || !l.Known() {
			continue
		}
		st := claimStatus{IPv4: netip.PrefixFrom(l.IP, f.Subnet.Bits()).String(), MAC: l.MAC, Node: node}
		if !l.Home.IsValid() {
			// A lease that moved in from another node's subnet has its
			// home there, which made its claim.
			st.Home = node
		}
		if l.IP6.IsValid() && f.Subnet6.IsValid() {
			st.IPv6 = netip.PrefixFrom(l.IP6, f.Subnet6.Bits()).String()
		}
		if l.State == leases.StateHeld {
			st.HeldUntil = l.Expires.UTC().Format(time.RFC3339)
		} else {
			st.Pod = l.Pod.Namespace + "/" + l.Pod.Name
		}
		out[l.VMName] = st
	}
	return out
}

// planClaims is the pure step from this node's leases (leaseClaims) and the
// claims as the API has them (have, sorted by VM, as list returns them) to
// the calls that bring them in line:
//   - a VM with a lease here and no claim: create it;
//   - a VM attached here whose claim says it is held, or names another
//     pod of this node, or a node that is gone or not Ready: the VM is
//     here now (update). One whose claim names a pod on another node
//     that is up is in a live migration (migrating): the claim stays
//     where it is until this node hears the guest on its bridge (heard:
//     the guest runs here now, and announced itself), or until the other
//     node's pod goes (its node then says it is held, and this node takes
//     it at its next pass);
//   - a VM held here whose claim still says it is attached here, or names
//     another hold time: update; one whose claim names another node is
//     that node's (the VM moved on; this node's held lease only keeps the
//     address from being handed out here);
//   - a claim of this node whose VM has no lease here any more (its hold
//     time ended, or vmlanectl claims release): delete it;
//   - a lease and claim that disagree on the addresses: a conflict,
//     reported, and the claim left as it is.
//
// A claim keeps the home it was created with: only the node whose subnets
// hold a VM's addresses creates its claim (a lease that moved in whose
// claim is gone waits for its home node to make it again).
func planClaims(want map[string]claimStatus, have []claim, node string, nodeUp func(string) bool, heard map[string]bool) ([]claimAction, []claimConflict) {
	var acts []claimAction
	var conflicts []claimConflict
	vms := make([]string, 0, len(want))
	for vm := range want {
		vms = append(vms, vm)
	}
	slices.Sort(vms)
	for _, vm := range vms {
		w := want[vm]
		c, ok := findClaim(have, vm)
		if ok {
			// What the claim records and the lease may lack stays (the
			// admission policy refuses to change it): its home, and an
			// IPv6 address the VM keeps on a node without IPv6.
			w.Home = c.Status.Home
			if w.IPv6 == "" {
				w.IPv6 = c.Status.IPv6
			}
		}
		switch {
		case !ok && w.Home == "":
			// Moved in: its home node makes the claim.
		case !ok:
			acts = append(acts, claimAction{Op: "create", VM: vm, Status: w})
		case c.Status.IPv4 != w.IPv4 || c.Status.MAC != w.MAC || (c.Status.IPv6 != w.IPv6 && c.Status.IPv6 != "" && w.IPv6 != ""):
			conflicts = append(conflicts, claimConflict{VM: vm, Lease: w, Claim: c.Status})
		case migrating(w, c.Status, node, nodeUp) && !heard[vm]:
			// The VM has a pod on another node too: a live
			// migration, whose claim (and routes) stay with the
			// node that has them until the guest is heard here.
		case w.Pod != "" && c.Status != w:
			acts = append(acts, claimAction{Op: "update", VM: vm, Status: w, ResourceVersion: c.ResourceVersion})
		case w.Pod == "" && c.Status.Node == node && c.Status != w:
			acts = append(acts, claimAction{Op: "update", VM: vm, Status: w, ResourceVersion: c.ResourceVersion})
		}
	}
	for _, c := range have {
		if c.Status.Node != node {
			continue
		}
		if _, ok := want[c.VM]; !ok {
			acts = append(acts, claimAction{Op: "delete", VM: c.VM, ResourceVersion: c.ResourceVersion})
		}
	}
	return acts, conflicts
}

// findClaim is vm's claim in have, sorted by VM (as list returns it).
func findClaim(have []claim, vm string) (claim, bool) {
	i, ok := claimAt(have, vm)
	if !ok {
		return claim{}, false
	}
	return have[i], true
}

// claimAt is where vm's claim is in cs, sorted by VM, or would go.
func claimAt(cs []claim, vm string) (int, bool) {
	return slices.BinarySearchFunc(cs, vm, func(c claim, vm string) int { return strings.Compare(c.VM, vm) })
}

// migrating reports whether a VM attached here (want) has a claim that
// names a pod of it on another node that is up: a live migration, this node
// its target or (once the claim moved on) its source.
func migrating(want, have claimStatus, node string, nodeUp func(string) bool) bool {
	return want.Pod != "" && have.Node != node && have.Pod != "" && nodeUp(have.Node)
}

// announceMargin is how long after a node starts waiting for a migrating
// VM's guest a frame from it must come to count as the guest running here.
// The source's last frames come before the claim moves to the target, the
// migration's end and an API round trip earlier; the margin keeps them
// from counting on the source, with the bridge's 10 ms clock ticks.
const announceMargin = 100 * time.Millisecond

// retakeAfter is how soon a node may take a VM's claim by hearing its guest
// in the same pod again after it last did and lost the claim since: two
// guests with one MAC running on two nodes (two pods of a VM that is not
// migrating, each with a running guest) would otherwise pull the routes to
// and fro at every frame. A new pod of the VM on the node (the target of a
// migration back, soon after one away) is heard at once.
const retakeAfter = 30 * time.Second

// announcements is what a node remembers of live migrations between its
// claims passes: since when it has waited for each migrating VM's guest,
// and when it last took a claim by hearing a guest, in which pod.
type announcements struct {
	waiting map[string]time.Time // VM -> since when
	took    map[string]tookClaim // VM -> when, and the pod
}

type tookClaim struct {
	at  time.Time
	pod string
}

// heard takes this pass's migrating VMs (VM -> MAC, see migrating), this
// node's pod of each (pods: VM -> pod), and when this node's bridge last
// had a frame from each MAC (lastFrame; a MAC it never had is absent), and
// says whose guests run here now: a frame from the guest came at least
// announceMargin after this node started waiting for it. A VM first seen
// waiting now is not heard: frames from before the wait prove nothing.
// flapping names the VMs heard here again in the same pod within
// retakeAfter of this node last taking their claim this way, after it lost
// the claim: those are not heard, and the caller says why.
func (a *announcements) heard(migrating, pods map[string]string, lastFrame map[string]time.Time, now time.Time) (heard map[string]bool, flapping []string) {
	if a.waiting == nil {
		a.waiting, a.took = map[string]time.Time{}, map[string]tookClaim{}
	}
	for vm := range a.waiting {
		if _, ok := migrating[vm]; !ok {
			delete(a.waiting, vm)
		}
	}
	for vm, t := range a.took {
		if now.Sub(t.at) >= retakeAfter {
			delete(a.took, vm)
		}
	}
	heard = map[string]bool{}
	for vm, mac := range migrating {
		since, ok := a.waiting[vm]
		if !ok {
			a.waiting[vm] = now
			continue
		}
		last, ok := lastFrame[mac]
		if !ok || last.Before(since.Add(announceMargin)) {
			continue
		}
		if took, ok := a.took[vm]; ok && since.After(took.at) && took.pod == pods[vm] {
			flapping = append(flapping, vm)
			continue
		}
		heard[vm] = true
		a.took[vm] = tookClaim{at: now, pod: pods[vm]}
	}
	slices.Sort(flapping)
	return heard, flapping
}

// frameKey is a MAC the bridge learnt on a port.
type frameKey struct{ Port, MAC string }

// framesOnPorts keeps, of the bridge's record (frames), the last frame of
// each migrating guest (migrating: VM -> MAC) on the port of its pod here
// (ports: VM -> the host veth of the migration target's attachment), keyed
// by MAC as announcements.heard takes them. A frame from the guest's MAC on
// any other port proves nothing: an unchecked port (antiSpoof off, a VM
// attached without CNI) can send one, as could a link-local frame before
// the bridges had no_linklocal_learn.
func framesOnPorts(frames map[frameKey]time.Time, migrating, ports map[string]string) map[string]time.Time {
	out := map[string]time.Time{}
	for vm, mac := range migrating {
		if t, ok := frames[frameKey{Port: ports[vm], MAC: mac}]; ok && ports[vm] != "" {
			out[mac] = t
		}
	}
	return out
}

// splitVM splits "NAMESPACE/NAME".
func splitVM(vm string) (ns, name string) {
	ns, name, _ = strings.Cut(vm, "/")
	return ns, name
}

// checkClaim says what makes a claim unusable: an address that does not
// parse or lies outside the pod network (cluster: the cluster CIDRs, or
// every node's pod subnets), or a MAC that does not parse. Such a claim is
// neither routed nor copied for the plugin; nothing holds its addresses
// for it.
func checkClaim(c claim, cluster prefixSet) (usable, error) {
	v4, v6, mac, err := checkClaimAddrs(c, cluster)
	return usable{claim: c, v4: v4, v6: v6, mac: mac}, err
}

// checkClaimAddrs is checkClaim's work: the claim's addresses and MAC,
// parsed, or what is wrong with them.
func checkClaimAddrs(c claim, cluster prefixSet) (v4, v6 netip.Prefix, mac string, err error) {
	if v4, err = netip.ParsePrefix(c.Status.IPv4); err != nil || !v4.Addr().Is4() {
		return v4, v6, "", fmt.Errorf("VMClaim %s: status.ipv4 %q is not an IPv4 address with its prefix length", c.VM, c.Status.IPv4)
	}
	if !cluster.contains(v4.Addr()) {
		return v4, v6, "", fmt.Errorf("VMClaim %s: status.ipv4 %q is outside the cluster's pod network %v", c.VM, c.Status.IPv4, cluster)
	}
	if c.Status.IPv6 != "" {
		if v6, err = netip.ParsePrefix(c.Status.IPv6); err != nil || !v6.Addr().Is6() {
			return v4, v6, "", fmt.Errorf("VMClaim %s: status.ipv6 %q is not an IPv6 address with its prefix length", c.VM, c.Status.IPv6)
		}
		if !cluster.contains(v6.Addr()) {
			return v4, v6, "", fmt.Errorf("VMClaim %s: status.ipv6 %q is outside the cluster's pod network %v", c.VM, c.Status.IPv6, cluster)
		}
	}
	if mac, err = leases.NormalizeMAC(c.Status.MAC); err != nil {
		return v4, v6, "", fmt.Errorf("VMClaim %s: status.mac %q is not a MAC address", c.VM, c.Status.MAC)
	}
	if c.Status.Node == "" {
		return v4, v6, "", fmt.Errorf("VMClaim %s: status.node is empty", c.VM)
	}
	return v4, v6, mac, nil
}

// nodeState is what checkClaimNodes needs of a Node: whether the cluster
// has it, and its pod subnets.
type nodeState struct {
	exists   bool
	podCIDRs []netip.Prefix
}

// checkClaimNodes says what makes a claim that checkClaim passed unusable
// by the nodes it names (nodeOf looks them up) or its hold time (now):
//   - its node is not in the cluster: the node was removed (the claim's
//     owner reference has Kubernetes delete it; a claim from before them,
//     or a cluster without the garbage collector, stays), and a route via
//     it, or an address held for it, would serve nothing;
//   - it is held, and its hold time has passed: its node's vmlaned, which
//     deletes it then, is not running;
//   - its addresses are not of its home node's pod subnets: only the home
//     node creates a VM's claim, and the admission policy holds a node to
//     its own name as home, so a claim whose home does not hold its
//     addresses is a node's claim to another node's pod addresses (a
//     plain pod's, say), which no node routes. A home node the cluster no
//     longer has holds nothing: its subnets may be another node's by now,
//     which then lends the addresses as its own.
func checkClaimNodes(u usable, nodeOf func(string) nodeState, now time.Time) error {
	c := u.claim
	if !nodeOf(c.Status.Node).exists {
		return fmt.Errorf("VMClaim %s: status.node %q is not a node of the cluster: not used", c.VM, c.Status.Node)
	}
	if c.Status.HeldUntil != "" {
		until, err := time.Parse(time.RFC3339, c.Status.HeldUntil)
		if err != nil {
			return fmt.Errorf("VMClaim %s: status.heldUntil %q is not an RFC 3339 time", c.VM, c.Status.HeldUntil)
		}
		if until.Before(now) {
			return fmt.Errorf("VMClaim %s: held until %s, which has passed (is node %s's vmlaned running?): not used", c.VM, c.Status.HeldUntil, c.Status.Node)
		}
	}
	if c.Status.Home == "" {
		return nil
	}
	home := nodeOf(c.Status.Home)
	if !home.exists {
		return nil
	}
	for _, a := range []netip.Prefix{u.v4, u.v6} {
		if a.IsValid() && !slices.ContainsFunc(home.podCIDRs, func(p netip.Prefix) bool { return p.Contains(a.Addr()) }) {
			return fmt.Errorf("VMClaim %s: %s is not of its home node %s's pod subnets %v: not used", c.VM, a.Addr(), c.Status.Home, home.podCIDRs)
		}
	}
	return nil
}

// usable is a claim that passed checkClaim, with what it parsed.
type usable struct {
	claim
	v4, v6 netip.Prefix
	mac    string // normalized
}

// clashes names the claims that name an address or a MAC that an older
// claim (by creation, then by VM name) names too, each with why. Two claims
// agree on an address only by mistake (one written by hand, or restored
// from a backup): the older one's VM holds it, and the younger claim is
// neither routed nor copied for the plugin, so no route takes the address
// from its holder and no pod of the younger claim's VM gets it.
func clashes(cs []usable) map[string]string {
	x := newClashIndex()
	for _, u := range cs {
		x.add(u)
	}
	return x.refused()
}

// clashIndex is what clashes decides, kept claim by claim: the claims that
// name each address and MAC, oldest first. A claim is refused when, of
// its IPv4 address, IPv6 address and MAC (in that order), one is named
// first by an older claim, which is what clashes' walk from the oldest
// claim to the youngest comes to. A pass that changes one claim of 10,000
// updates its few entries instead of sorting them all.
type clashIndex struct {
	byVM map[string]usable
	// holders are the VMs that name each key, oldest first; contested
	// the keys that more than one names.
	holders   map[clashKey][]string
	contested map[clashKey]bool
}

// clashKey is an address or a MAC (normalized) that a claim names.
type clashKey struct {
	addr netip.Addr
	mac  string
}

func newClashIndex() *clashIndex {
	return &clashIndex{byVM: map[string]usable{}, holders: map[clashKey][]string{}, contested: map[clashKey]bool{}}
}

// claimField is an address or MAC a claim names: its key, and the status
// field and its value as the claim spells it.
type claimField struct {
	key          clashKey
	field, value string
}

// fields are what u names, in the order clashes reports them.
func (u usable) fields() []claimField {
	out := []claimField{{clashKey{addr: u.v4.Addr()}, "status.ipv4", u.Status.IPv4}}
	if u.v6.IsValid() {
		out = append(out, claimField{clashKey{addr: u.v6.Addr()}, "status.ipv6", u.Status.IPv6})
	}
	return append(out, claimField{clashKey{mac: u.mac}, "status.mac", u.Status.MAC})
}

// older reports whether the claim a is older than b: by creation, then by
// VM name.
func (x *clashIndex) older(a, b string) bool {
	ca, cb := x.byVM[a].Created, x.byVM[b].Created
	if c := ca.Compare(cb); c != 0 {
		return c < 0
	}
	return a < b
}

// add puts u in the index, in place of what its VM named before.
func (x *clashIndex) add(u usable) {
	x.remove(u.VM)
	x.byVM[u.VM] = u
	for _, f := range u.fields() {
		hs := x.holders[f.key]
		i := 0
		for i < len(hs) && x.older(hs[i], u.VM) {
			i++
		}
		hs = slices.Insert(hs, i, u.VM)
		x.holders[f.key] = hs
		if len(hs) > 1 {
			x.contested[f.key] = true
		}
	}
}

// remove takes vm's claim out of the index.
func (x *clashIndex) remove(vm string) {
	u, ok := x.byVM[vm]
	if !ok {
		return
	}
	for _, f := range u.fields() {
		hs := slices.DeleteFunc(x.holders[f.key], func(h string) bool { return h == vm })
		switch len(hs) {
		case 0:
			delete(x.holders, f.key)
		case 1:
			delete(x.contested, f.key)
			x.holders[f.key] = hs
		default:
			x.holders[f.key] = hs
		}
	}
	delete(x.byVM, vm)
}

// refused is clashes' answer: each refused claim's VM, with why.
func (x *clashIndex) refused() map[string]string {
	var out map[string]string
	for k := range x.contested {
		for _, vm := range x.holders[k][1:] {
			if _, done := out[vm]; done {
				continue
			}
			u := x.byVM[vm]
			for _, f := range u.fields() {
				if holder := x.holders[f.key][0]; holder != vm {
					if out == nil {
						out = map[string]string{}
					}
					out[vm] = fmt.Sprintf("VMClaim %s: %s %q is VMClaim %s's, an older claim; this one is not used (delete it, or give it addresses of its own)", vm, f.field, f.value, holder)
					break
				}
			}
		}
	}
	return out
}

// prefixSet answers whether an address is in any of a set of prefixes in
// one map lookup per prefix length: the pod network of a cluster without
// --cluster-cidr is every node's podCIDR, 5,000 of them, and a claims pass
// checks 10,000 claims against it.
type prefixSet struct {
	lens []int
	set  map[netip.Prefix]bool // masked
	all  []netip.Prefix
}

func newPrefixSet(ps []netip.Prefix) prefixSet {
	s := prefixSet{set: map[netip.Prefix]bool{}, all: ps}
	for _, p := range ps {
		m := p.Masked()
		if !s.set[m] {
			s.set[m] = true
			if !slices.Contains(s.lens, m.Bits()) {
				s.lens = append(s.lens, m.Bits())
			}
		}
	}
	return s
}

func (s prefixSet) contains(a netip.Addr) bool {
	for _, l := range s.lens {
		if p, err := a.Prefix(l); err == nil && s.set[p] {
			return true
		}
	}
	return false
}

// String names the prefixes, the first few of a long list.
func (s prefixSet) String() string {
	const show = 4
	if len(s.all) <= show {
		return fmt.Sprint(s.all)
	}
	return fmt.Sprintf("%v … (%d prefixes)", s.all[:show], len(s.all))
}

// hostRouteDiff is what keeps the bridge's host routes (proto 78, see
// plugin.HostRoutes) exactly those of the live leases of f whose addresses
// moved in and whose guest runs here: routes to add and to delete. The
// plugin adds and removes them at ADD and DEL; this sweeps what an
// interrupted one left (a stale route would send a VM's traffic onto a
// bridge it is no longer on) and puts back what went with a bridge made
// anew. f nil is a node without a lease file.
//
// elsewhere names the VMs whose claim names another node. Their leases
// here get no host route: a live migration's target before the guest runs
// here, or its source (not the VM's home) after it left. A host route
// would send this node's own traffic for the VM onto a bridge where no
// guest of it runs, while the route controller's route via the claim's
// node reaches it.
func hostRouteDiff(f *leases.File, have []netip.Prefix, elsewhere map[string]bool) (add, del []netip.Prefix) {
	want := map[netip.Prefix]bool{}
	if f != nil {
		for _, l := range f.Leases {
			if l.Live() && !elsewhere[l.VMName] {
				for _, p := range plugin.HostRoutes(l) {
					want[p] = true
				}
			}
		}
	}
	add, del = setDiff(have, want, func(netip.Prefix) bool { return true })
	slices.SortFunc(add, netip.Prefix.Compare)
	return add, del
}

// claimedElsewhere names, of vms, the VMs whose claims, as have (sorted
// by VM) lists them with the actions done applied, name a node other than
// self: a look-up per VM of the node's leases, not a map of every claim.
func claimedElsewhere(have []claim, done []claimAction, self string, vms []string) map[string]bool {
	node := map[string]string{}
	for _, vm := range vms {
		if c, ok := findClaim(have, vm); ok {
			node[vm] = c.Status.Node
		}
	}
	for _, a := range done {
		if a.Op == "delete" {
			delete(node, a.VM)
		} else {
			node[a.VM] = a.Status.Node
		}
	}
	out := map[string]bool{}
	for vm, n := range node {
		if n != "" && n != self {
			out[vm] = true
		}
	}
	return out
}

// setDiff is what to add to have and to delete from it to make it want,
// leaving alone the entries of have that ours says are not ours. It takes
// want's entries as it goes.
func setDiff[T comparable](have []T, want map[T]bool, ours func(T) bool) (add, del []T) {
	for _, x := range have {
		if !ours(x) {
			continue
		}
		if want[x] {
			delete(want, x)
		} else {
			del = append(del, x)
		}
	}
	for x := range want {
		add = append(add, x)
	}
	return add, del
}

// proxyDiff is what keeps the bridge's NDP proxy entries of subnet6 (its
// own IPv6 pod subnet) exactly want's addresses of subnet6: entries to add
// and to delete. Entries of other prefixes are not vmlane's and stay.
func proxyDiff(have, want []netip.Addr, subnet6 netip.Prefix) (add, del []netip.Addr) {
	wanted := map[netip.Addr]bool{}
	for _, a := range want {
		if a.IsValid() && subnet6.Contains(a) {
			wanted[a] = true
		}
	}
	add, del = setDiff(have, wanted, subnet6.Contains)
	slices.SortFunc(add, netip.Addr.Compare)
	return add, del
}

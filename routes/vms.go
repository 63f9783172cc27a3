package routes

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// VM is a VM whose addresses belong to VM identity (a VMClaim): Node is
// where they are held now. When Node's pod subnets do not hold an address
// (the VM moved there from the node whose subnet does), every other node
// routes that one address, /32 or /128, to Node: more specific than the
// home node's pod subnet route.
type VM struct {
	Name  string // NAMESPACE/NAME
	Addrs []netip.Addr
	Node  string
}

// vmRoutes are the host routes of VMs that live away from their addresses'
// home subnets, as seen from node self: Node routes them onto its bridge
// itself (the CNI plugin's host route), the others via Node's address of
// the family. A VM on a node the list does not have, or that has no address
// of the family, is skipped and said why.
func vmRoutes(nodes []Node, vms []VM, self string) ([]Route, []Skip) {
	if len(vms) == 0 {
		return nil, nil
	}
	byName := make(map[string]*Node, len(nodes))
	for i := range nodes {
		byName[nodes[i].Name] = &nodes[i]
	}
	var routes []Route
	var skips []Skip
	for _, vm := range vms {
		if vm.Node == self {
			continue
		}
		n := byName[vm.Node]
		for _, a := range vm.Addrs {
			dst := netip.PrefixFrom(a, a.BitLen())
			if n == nil {
				skips = append(skips, Skip{Node: vm.Node, Dst: dst, Reason: fmt.Sprintf("VM %s is on node %s, which is not in the cluster", vm.Name, vm.Node)})
				continue
			}
			if slices.ContainsFunc(n.PodCIDRs, func(p netip.Prefix) bool { return p.Contains(a) }) {
				continue // at home: the pod subnet's route reaches it
			}
			via, ok := firstOfFamily(n.Addrs, a.Is4())
			if !ok {
				skips = append(skips, Skip{Node: vm.Node, Dst: dst, Reason: fmt.Sprintf("no %s address to route VM %s's %s via", family(a), vm.Name, a)})
				continue
			}
			routes = append(routes, Route{Dst: dst, Via: via, Node: vm.Node})
		}
	}
	return routes, skips
}

// SetVMs replaces the VMs the controller routes (the cluster's VMClaims)
// and, when they changed, has it reconcile. It keeps them sorted by name,
// as the VMClaims pass gives them.
func (c *Controller) SetVMs(vms []VM) {
	if !slices.IsSortedFunc(vms, vmByName) {
		vms = slices.SortedStableFunc(slices.Values(vms), vmByName)
	}
	c.mu.Lock()
	old := c.vms
	same := slices.EqualFunc(vms, old, sameVM)
	if !same {
		c.vms = slices.Clone(vms)
	}
	c.mu.Unlock()
	if !same && !c.moveVMs(old, vms) {
		c.Trigger()
	}
}

func sameVM(a, b VM) bool {
	return a.Name == b.Name && a.Node == b.Node && slices.Equal(a.Addrs, b.Addrs)
}

// moveFastMax is how many VMs may change in one SetVMs for it to move
// their routes itself (moveVMs): a live migration or a move changes one; a
// burst (the first list of the claims, a node's VMs all moving) is left to
// the reconcile.
const moveFastMax = 64

// moveVMs moves the host routes of the VMs that changed from old to vms at
// once (Loop.Apply), instead of a reconcile, which computes the desired
// state of every Node and VM and reads the kernel's whole table (60 ms at
// 5,000 Nodes and 10,000 VMs, most of a move's claim-to-route time), where
// one VM's move needs one route. It reports whether it did the whole of
// the change; if not, the caller triggers the reconcile. Left to the
// reconcile: a VM that went, a VM on (or from) a node not in the cache, a
// route through the tunnel or the fabric (the kernel refuses its next
// hop) or held by another owner, a burst of changes, and everything
// before the first reconcile. The resync tick and the kernel's
// route-deletion watch check the routes as before. A node that announces
// to BGP peers announces a change of its own VMs (one that came or went)
// at once too: its pod subnets as the last reconcile had them, and its
// VMs as they are now.
func (c *Controller) moveVMs(old, vms []VM) bool {
	select {
	case <-c.ready:
	default:
		return false // the early phase or the first reconcile has the table
	}
	now, was, ok := changedVMs(old, vms)
	if !ok {
		return false // a burst, or VMs that went
	}
	changed := slices.Concat(now, was)
	if c.opts.Announcer != nil && slices.ContainsFunc(changed, func(v VM) bool { return v.Node == c.opts.NodeName }) {
		c.loop.Between(func() {
			// The VMs as they are when no reconcile runs: a reconcile
			// after this one announces these or newer.
			c.opts.Announcer.Announce(announceSet(c.announcePods, c.ownPodCIDRs, c.vmList(), c.opts.NodeName))
		})
	}
	var nodes []Node
	seen := map[string]bool{}
	for _, v := range changed {
		if seen[v.Node] {
			continue
		}
		seen[v.Node] = true
		if n, err := c.lister.Get(v.Node); err == nil {
			nodes = append(nodes, FromNode(n, c.opts.NodeIPAnnotation))
		}
	}
	want, skips := vmRoutes(nodes, now, c.opts.NodeName)
	had, hadSkips := vmRoutes(nodes, was, c.opts.NodeName)
	wanted := map[netip.Prefix]bool{}
	for _, r := range want {
		wanted[r.Dst] = true
	}
	// A route that goes is deleted by its destination and protocol
	// alone: the kernel's may have another next hop than the node's
	// address that vmRoutes names (the tunnel's or the fabric's, which the
	// reconcile put in), and a deletion that names the wrong one finds
	// nothing, which Delete takes for done.
	var del []KernelRoute
	for _, r := range had {
		if !wanted[r.Dst] {
			del = append(del, KernelRoute{Dst: r.Dst})
		}
	}
	n := c.loop.Apply(want, del)
	c.log.Debug("VM routes moved without a reconcile", "vms", len(now), "routes", n, "of", len(want)+len(del))
	return len(skips) == 0 && len(hadSkips) == 0 && n == len(want)+len(del)
}

func vmByName(a, b VM) int { return strings.Compare(a.Name, b.Name) }

// changedVMs is what changed from old to vms, both sorted by name (SetVMs
// keeps them so), walked side by side: the VMs of vms that are new or
// changed (now) and, of those, what old had of each (was). ok is false for
// more than moveFastMax changes, or a VM of old that vms lacks.
func changedVMs(old, vms []VM) (now, was []VM, ok bool) {
	i := 0
	for _, v := range vms {
		if i < len(old) && old[i].Name < v.Name {
			return nil, nil, false // old[i] went
		}
		if i < len(old) && old[i].Name == v.Name {
			o := old[i]
			i++
			if sameVM(o, v) {
				continue
			}
			was = append(was, o)
		}
		if len(now) == moveFastMax {
			return nil, nil, false
		}
		now = append(now, v)
	}
	return now, was, i == len(old)
}

func (c *Controller) vmList() []VM {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.vms
}

// PodCIDRs is every node's pod subnets in the informer's cache: the pod
// network, where --cluster-cidr does not name it. It is read again only
// when a Node changed in a way routes read (NodesGeneration): a VMClaims
// pass asks for it each time, and reading 5,000 Nodes took a few ms of
// each. The caller must not change the slice.
func (c *Controller) PodCIDRs() []netip.Prefix {
	c.podCIDRsMu.Lock()
	defer c.podCIDRsMu.Unlock()
	// The generation before the list: a change during it makes the next
	// call list again.
	gen := c.nodesGen.Load()
	if c.podCIDRs != nil && c.podCIDRsGen == gen {
		return c.podCIDRs
	}
	out := []netip.Prefix{}
	for _, n := range c.nodes() {
		out = append(out, n.PodCIDRs...)
	}
	c.podCIDRs, c.podCIDRsGen = out, gen
	return out
}

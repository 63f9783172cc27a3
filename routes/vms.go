package routes

import (
	"fmt"
	"net/netip"
	"slices"
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
// and, when they changed, has it reconcile.
func (c *Controller) SetVMs(vms []VM) {
	c.mu.Lock()
	same := slices.EqualFunc(vms, c.vms, func(a, b VM) bool {
		return a.Name == b.Name && a.Node == b.Node && slices.Equal(a.Addrs, b.Addrs)
	})
	if !same {
		c.vms = slices.Clone(vms)
	}
	c.mu.Unlock()
	if !same {
		c.Trigger()
	}
}

func (c *Controller) vmList() []VM {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.vms
}

// PodCIDRs is every node's pod subnets in the informer's cache: the pod
// network, where --cluster-cidr does not name it.
func (c *Controller) PodCIDRs() []netip.Prefix {
	var out []netip.Prefix
	for _, n := range c.nodes() {
		out = append(out, n.PodCIDRs...)
	}
	return out
}

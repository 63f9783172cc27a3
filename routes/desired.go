package routes

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/vmlane/vmlane/internal/netaddr"
)

// Node is what the route controller needs of a Kubernetes Node.
type Node struct {
	Name string
	// PodCIDRs are the node's pod subnets (spec.podCIDRs), IPv4 and IPv6.
	PodCIDRs []netip.Prefix
	// Addrs are next-hop candidates in order of preference: the
	// --node-ip-annotation address, then InternalIPs. The first of a
	// podCIDR's family is its next hop.
	Addrs []netip.Addr
	// Problems are fields that did not parse; the node is used as far as
	// the rest allows, and each problem is reported as an Event.
	Problems []string
}

// Route is a route vmlane wants in the kernel: Dst via Via, for Node.
type Route struct {
	Dst  netip.Prefix
	Via  netip.Addr
	Node string
}

func (r Route) String() string { return r.Dst.String() + " via " + r.Via.String() }

// Skip is a route vmlane does not install, and why.
type Skip struct {
	Node   string
	Dst    netip.Prefix
	Reason string
}

// Desired is the state the node should be in.
type Desired struct {
	// Routes to every other node's pod subnets, sorted by Dst.
	Routes []Route
	// Skips lists what could not be routed (reported as Events).
	Skips []Skip
	// Self is this node's own pod subnets.
	Self []netip.Prefix
	// PodCIDRs is every node's pod subnets, this node's included: the
	// cluster's pod network when --cluster-cidr is not given.
	PodCIDRs []netip.Prefix
	// NAT is the NAT exemption of each family this node has a pod subnet
	// of, IPv4 first; WithNAT fills it. Each names its family by its
	// PodCIDR, so a consumer never matches them to families by position.
	NAT []NATOptions
}

// WithNAT returns d with its NAT exemptions: for each family of this
// node's pod subnets, the first such subnet, the pod network of that
// family (cluster, or every node's podCIDRs when cluster is empty) and
// masquerade.
func (d Desired) WithNAT(cluster []netip.Prefix, masquerade bool) Desired {
	if len(cluster) == 0 {
		cluster = Aggregate(d.PodCIDRs)
	}
	d.NAT = nil
	for _, v4 := range []bool{true, false} {
		i := slices.IndexFunc(d.Self, func(p netip.Prefix) bool { return p.Addr().Is4() == v4 })
		if i < 0 {
			continue
		}
		var fam []netip.Prefix
		for _, p := range cluster {
			if p.Addr().Is4() == v4 {
				fam = append(fam, p)
			}
		}
		d.NAT = append(d.NAT, NATOptions{PodCIDR: d.Self[i], Cluster: fam, Masquerade: masquerade})
	}
	return d
}

// Compute is the pure function from the Node list to the desired routes:
// for every other node, each podCIDR via that node's address of the same
// family. Nodes without podCIDRs or without an address of the family are
// skipped. Two nodes whose podCIDRs overlap get neither route for the
// overlapping subnets (there is no telling which is right), and so does a
// node whose podCIDR overlaps this node's own.
func Compute(nodes []Node, self string) Desired {
	var d Desired
	for _, n := range nodes {
		if n.Name == self {
			d.Self = append(d.Self, n.PodCIDRs...)
		}
		d.PodCIDRs = append(d.PodCIDRs, n.PodCIDRs...)
	}
	slices.SortFunc(d.PodCIDRs, comparePrefix)
	d.PodCIDRs = slices.Compact(d.PodCIDRs)

	overlaps := findOverlaps(nodes)
	overlap := func(node string, p netip.Prefix) string { return overlaps[claim{p, node}] }

	for _, n := range nodes {
		if n.Name == self {
			continue
		}
		if len(n.PodCIDRs) == 0 {
			d.Skips = append(d.Skips, Skip{Node: n.Name, Reason: "no podCIDRs yet"})
			continue
		}
		for _, p := range n.PodCIDRs {
			if why := overlap(n.Name, p); why != "" {
				d.Skips = append(d.Skips, Skip{Node: n.Name, Dst: p, Reason: why})
				continue
			}
			via, ok := firstOfFamily(n.Addrs, p.Addr().Is4())
			if !ok {
				d.Skips = append(d.Skips, Skip{Node: n.Name, Dst: p, Reason: fmt.Sprintf("no %s address to route %s via", family(p.Addr()), p)})
				continue
			}
			d.Routes = append(d.Routes, Route{Dst: p, Via: via, Node: n.Name})
		}
	}
	slices.SortFunc(d.Routes, func(a, b Route) int { return comparePrefix(a.Dst, b.Dst) })
	slices.SortFunc(d.Skips, func(a, b Skip) int {
		if a.Node != b.Node {
			if a.Node < b.Node {
				return -1
			}
			return 1
		}
		return comparePrefix(a.Dst, b.Dst)
	})
	return d
}

type claim struct {
	p    netip.Prefix
	node string
}

// findOverlaps returns, for each (podCIDR, node) that overlaps a podCIDR of
// another node, why. CIDRs overlap only by containment, so after sorting by
// start address (wider first) every overlap is with the widest earlier
// prefix still open: one pass, O(n log n) for thousands of nodes.
func findOverlaps(nodes []Node) map[claim]string {
	var claims []claim
	for _, n := range nodes {
		for _, p := range n.PodCIDRs {
			claims = append(claims, claim{p.Masked(), n.Name})
		}
	}
	slices.SortFunc(claims, func(a, b claim) int {
		if c := comparePrefix(a.p, b.p); c != 0 {
			return c
		}
		if a.node < b.node {
			return -1
		}
		if a.node > b.node {
			return 1
		}
		return 0
	})
	out := map[claim]string{}
	mark := func(a, b claim) {
		if _, seen := out[a]; !seen {
			out[a] = fmt.Sprintf("podCIDR %s overlaps %s of node %s", a.p, b.p, b.node)
		}
	}
	open := -1 // index of the prefix whose range reaches furthest so far
	for i, c := range claims {
		if open >= 0 && claims[open].p.Addr().Is4() == c.p.Addr().Is4() && claims[open].p.Contains(c.p.Addr()) {
			if claims[open].node != c.node {
				mark(c, claims[open])
				mark(claims[open], c)
			}
			if netaddr.LastAddr(c.p).Compare(netaddr.LastAddr(claims[open].p)) <= 0 {
				continue
			}
		}
		open = i
	}
	return out
}

func firstOfFamily(addrs []netip.Addr, v4 bool) (netip.Addr, bool) {
	for _, a := range addrs {
		if a.Is4() == v4 {
			return a, true
		}
	}
	return netip.Addr{}, false
}

func family(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// Aggregate returns the smallest set of prefixes that covers exactly the
// same addresses as ps: contained prefixes are dropped and sibling pairs
// merged into their parent, repeatedly. Node IPAM hands out consecutive
// podCIDRs from one cluster CIDR, so 5,000 nodes' /24s collapse to a few
// prefixes, and the NAT exemption stays a few iptables rules instead of one
// per node.
func Aggregate(ps []netip.Prefix) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.Masked())
	}
	for {
		slices.SortFunc(out, comparePrefix)
		merged := out[:0]
		changed := false
		for _, p := range out {
			if n := len(merged); n > 0 {
				last := merged[n-1]
				if last.Addr().Is4() == p.Addr().Is4() && last.Contains(p.Addr()) && last.Bits() <= p.Bits() {
					changed = changed || last != p
					continue // p is inside last
				}
				if last.Bits() == p.Bits() && last.Bits() > 0 && last.Addr().Is4() == p.Addr().Is4() {
					parent := netip.PrefixFrom(last.Addr(), last.Bits()-1).Masked()
					if parent.Addr() == last.Addr() && parent.Contains(p.Addr()) {
						merged[n-1] = parent
						changed = true
						continue
					}
				}
			}
			merged = append(merged, p)
		}
		out = merged
		if !changed {
			return out
		}
	}
}

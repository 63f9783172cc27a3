package routes

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"time"

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
	// VM is whether the node is labelled VMNodeLabel=true; Linux whether
	// the kubelet labelled it kubernetes.io/os=linux; Ready whether its
	// Ready condition is True. They pick the nodes a routes-only daemon
	// routes to and the Service gateways.
	VM, Linux, Ready bool
	// Created is when the Node was made: a node that still has no
	// podCIDRs well after it is almost surely on a CNI with its own IPAM.
	Created time.Time
	// Problems are fields that did not parse; the node is used as far as
	// the rest allows, and each problem is reported as an Event.
	Problems []string
}

// Policy is what one node's vmlaned routes, besides the pod subnets of
// every other node.
type Policy struct {
	// Self is this node; its own podCIDRs are not routed.
	Self string
	// VMNodesOnly is routes-only mode: route to the pod subnets of VM
	// nodes only (the other nodes are the cluster CNI's business), and
	// keep no NAT rules for this node's own pod subnet, which is not
	// vmlane's.
	VMNodesOnly bool
	// Services are the cluster's Service CIDRs (--service-cidr). With
	// RouteServices (a node without kube-proxy: a Mac) they are routed
	// via a Service gateway and pod traffic to them is not NATed here;
	// without it this node is a gateway for nodes that route them here
	// (their pods' traffic to Services is masqueraded after kube-proxy's
	// DNAT, so that replies come back through this node).
	Services      []netip.Prefix
	RouteServices bool
	// VMs are the VMs with VM identity (VMClaims): those away from their
	// addresses' home subnets get a host route each (vmRoutes).
	VMs []VM
	// Tunnel asks for Desired.Addrs: the tunnel finds each peer's
	// underlay address there.
	Tunnel bool
	// Announce asks for Desired.Announce (--cross-subnet=bgp).
	Announce bool
}

// Route is a route vmlane wants in the kernel: Dst via Via, for Node. Dev
// is set only on a route through the tunnel (Dst via Via dev Dev onlink).
type Route struct {
	Dst  netip.Prefix
	Via  netip.Addr
	Node string
	Dev  string
	// TunnelVia is the next hop of the route through the tunnel, with
	// Policy.Tunnel: the network address of Node's pod subnet of the
	// family, as flannel's VXLAN backend has it. Not Node's own address:
	// Linux refuses an IPv6 on-link gateway that a route through another
	// device covers (a node's route to another node subnet), and the pod
	// subnet is covered by nothing but this route. Zero when Node has no
	// pod subnet of the family.
	TunnelVia netip.Addr
}

func (r Route) String() string {
	s := r.Dst.String() + " via " + r.Via.String()
	if r.Dev != "" {
		s += " dev " + r.Dev + " onlink"
	}
	return s
}

// Skip is a route vmlane does not install, and why.
type Skip struct {
	Node   string
	Dst    netip.Prefix
	Reason string
	// NoPodCIDRs marks a node without podCIDRs: new (node IPAM has not
	// given it any yet) or on a CNI with its own IPAM; Created says which
	// is likelier.
	NoPodCIDRs bool
	Created    time.Time
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
	// Gateways are the routes of the Service CIDRs to a Service gateway
	// (also in Routes), on a node that routes Services.
	Gateways []Route
	// Services and RouteServices are Policy's; ServiceClients are the
	// pod subnets whose traffic to Services this node masquerades as a
	// gateway: every other node's (full mode) or the VM nodes' (routes
	// only), aggregated. WithNAT turns them into NATOptions.
	Services       []netip.Prefix
	RouteServices  bool
	ServiceClients []netip.Prefix
	// NAT is the NAT exemption of each family this node has a pod subnet
	// of, IPv4 first; WithNAT fills it. Each names its family by its
	// PodCIDR, so a consumer never matches them to families by position.
	NAT []NATOptions
	// Addrs are every other node's addresses, by name, with
	// Policy.Tunnel.
	Addrs map[string][]netip.Addr
	// Announce is what this node announces to BGP peers, with
	// Policy.Announce: its pod subnets (but one that overlaps another
	// node's: there is no telling which is right, so neither is
	// announced), and the /32 and /128 of the VMs that live here away
	// from their addresses' home subnets. Sorted.
	Announce []netip.Prefix
	// announcePods is the pod subnets of Announce, and own all of this
	// node's: what a VM's move, which changes only the VMs' part, keeps
	// (announceSet).
	announcePods, own []netip.Prefix
}

// WithNAT returns d with its NAT rules: for each family of this node's pod
// subnets, the first such subnet, the pod network of that family (cluster,
// or every node's podCIDRs when cluster is empty), masquerade, and the
// Service CIDRs of the family with what this node does with them; and, on
// a node without a pod subnet of vmlane's (routes-only), the Service
// gateway's masquerade alone, where it has clients.
func (d Desired) WithNAT(cluster []netip.Prefix, masquerade bool) Desired {
	if len(cluster) == 0 {
		cluster = Aggregate(d.PodCIDRs)
	}
	d.NAT = nil
	for _, v4 := range []bool{true, false} {
		o := NATOptions{
			Services:       ofFamily(d.Services, v4),
			RouteServices:  d.RouteServices,
			ServiceClients: ofFamily(d.ServiceClients, v4),
		}
		if d.RouteServices || len(o.Services) == 0 {
			o.ServiceClients = nil
		}
		i := slices.IndexFunc(d.Self, func(p netip.Prefix) bool { return p.Addr().Is4() == v4 })
		if i >= 0 {
			o.PodCIDR, o.Cluster, o.Masquerade = d.Self[i], ofFamily(cluster, v4), masquerade
		} else if len(o.ServiceClients) == 0 {
			continue
		}
		d.NAT = append(d.NAT, o)
	}
	return d
}

func ofFamily(ps []netip.Prefix, v4 bool) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if p.Addr().Is4() == v4 {
			out = append(out, p)
		}
	}
	return out
}

// Compute is the pure function from the Node list to the desired routes:
// for every other node (every other VM node, in routes-only mode), each
// podCIDR via that node's address of the same family. Nodes without
// podCIDRs or without an address of the family are skipped. Two nodes
// whose podCIDRs overlap get neither route for the overlapping subnets
// (there is no telling which is right), and so does a node whose podCIDR
// overlaps this node's own. With p.RouteServices, each Service CIDR is
// routed via a Service gateway (gatewayFor).
func Compute(nodes []Node, p Policy) Desired {
	d := Desired{Services: p.Services, RouteServices: p.RouteServices}
	var clients []netip.Prefix
	for _, n := range nodes {
		if n.Name == p.Self {
			if !p.VMNodesOnly {
				d.Self = append(d.Self, n.PodCIDRs...)
			}
		} else if !p.VMNodesOnly || n.VM {
			clients = append(clients, n.PodCIDRs...)
		}
		d.PodCIDRs = append(d.PodCIDRs, n.PodCIDRs...)
	}
	slices.SortFunc(d.PodCIDRs, comparePrefix)
	d.PodCIDRs = slices.Compact(d.PodCIDRs)
	if len(p.Services) > 0 && !p.RouteServices {
		d.ServiceClients = Aggregate(clients)
	}

	if p.Tunnel {
		d.Addrs = make(map[string][]netip.Addr, len(nodes))
		for _, n := range nodes {
			if n.Name != p.Self {
				d.Addrs[n.Name] = n.Addrs
			}
		}
	}
	overlaps := findOverlaps(nodes)
	overlap := func(node string, p netip.Prefix) string { return overlaps[claim{p, node}] }

	for _, n := range nodes {
		if n.Name == p.Self || (p.VMNodesOnly && !n.VM) {
			continue
		}
		if len(n.PodCIDRs) == 0 {
			d.Skips = append(d.Skips, Skip{Node: n.Name, Reason: "no podCIDRs", NoPodCIDRs: true, Created: n.Created})
			continue
		}
		for _, c := range n.PodCIDRs {
			if why := overlap(n.Name, c); why != "" {
				d.Skips = append(d.Skips, Skip{Node: n.Name, Dst: c, Reason: why})
				continue
			}
			via, ok := firstOfFamily(n.Addrs, c.Addr().Is4())
			if !ok {
				d.Skips = append(d.Skips, Skip{Node: n.Name, Dst: c, Reason: fmt.Sprintf("no %s address to route %s via", family(c.Addr()), c)})
				continue
			}
			d.Routes = append(d.Routes, Route{Dst: c, Via: via, Node: n.Name})
		}
	}
	if p.RouteServices {
		for _, svc := range p.Services {
			gw, via, ok := gatewayFor(nodes, p.Self, svc.Addr().Is4())
			if !ok {
				d.Skips = append(d.Skips, Skip{Node: p.Self, Dst: svc, Reason: fmt.Sprintf(
					"no Service gateway for %s: no other Linux node that is Ready, not a VM node, and has an %s address; pods on node %s cannot reach Services",
					svc, family(svc.Addr()), p.Self)})
				continue
			}
			r := Route{Dst: svc, Via: via, Node: gw}
			d.Routes = append(d.Routes, r)
			d.Gateways = append(d.Gateways, r)
		}
	}
	vr, vs := vmRoutes(nodes, p.VMs, p.Self)
	d.Routes, d.Skips = append(d.Routes, vr...), append(d.Skips, vs...)
	if p.Tunnel {
		setTunnelVias(d.Routes, nodes)
	}
	if p.Announce {
		var skips []Skip
		d.announcePods, d.own, skips = announcedPods(nodes, p.Self, overlap)
		d.Announce = announceSet(d.announcePods, d.own, p.VMs, p.Self)
		d.Skips = append(d.Skips, skips...)
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

// announcedPods is the pod subnets node self announces, all of its own,
// and those it does not announce, with the reason.
func announcedPods(nodes []Node, self string, overlap func(string, netip.Prefix) string) (pods, own []netip.Prefix, skips []Skip) {
	for _, n := range nodes {
		if n.Name != self {
			continue
		}
		own = n.PodCIDRs
		for _, c := range n.PodCIDRs {
			if why := overlap(self, c); why != "" {
				skips = append(skips, Skip{Node: self, Dst: c, Reason: "not announced to BGP peers: " + why})
				continue
			}
			pods = append(pods, c.Masked())
		}
	}
	return pods, own, skips
}

// announceSet is what node self announces (Desired.Announce): pods, and
// the /32 and /128 of the VMs of vms that live on self outside own, its
// pod subnets.
func announceSet(pods, own []netip.Prefix, vms []VM, self string) []netip.Prefix {
	out := slices.Clone(pods)
	for _, vm := range vms {
		if vm.Node != self {
			continue
		}
		for _, a := range vm.Addrs {
			if !slices.ContainsFunc(own, func(p netip.Prefix) bool { return p.Contains(a) }) {
				out = append(out, netip.PrefixFrom(a, a.BitLen()))
			}
		}
	}
	slices.SortFunc(out, comparePrefix)
	return slices.Compact(out)
}

// setTunnelVias fills each route's TunnelVia from its node's pod subnets.
func setTunnelVias(rs []Route, nodes []Node) {
	byName := make(map[string]*Node, len(nodes))
	for i := range nodes {
		byName[nodes[i].Name] = &nodes[i]
	}
	for i, r := range rs {
		n := byName[r.Node]
		if n == nil {
			continue
		}
		for _, p := range n.PodCIDRs {
			if p.Addr().Is4() == r.Dst.Addr().Is4() {
				rs[i].TunnelVia = p.Masked().Addr()
				break
			}
		}
	}
}

// gatewayFor picks the Service gateway of node self for one family: among
// the other Linux nodes that are Ready, are not VM nodes (the nodes that
// run kube-proxy and a vmlaned that masquerades for their clients) and
// have an address of the family, the one that ranks highest for self by
// rendezvous hashing. Each node that routes Services keeps its gateway
// while that gateway stays, the nodes spread over the gateways, and a
// gateway's loss moves only the nodes that used it.
func gatewayFor(nodes []Node, self string, v4 bool) (name string, via netip.Addr, ok bool) {
	var best uint64
	for _, n := range nodes {
		if n.Name == self || n.VM || !n.Linux || !n.Ready {
			continue
		}
		a, has := firstOfFamily(n.Addrs, v4)
		if !has {
			continue
		}
		h := fnv.New64a()
		h.Write([]byte(self))
		h.Write([]byte{0})
		h.Write([]byte(n.Name))
		if score := h.Sum64(); !ok || score > best || (score == best && n.Name < name) {
			name, via, best, ok = n.Name, a, score, true
		}
	}
	return name, via, ok
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

// FirstAddr is the node's first address of a family (v4, or IPv6): its
// next hop of that family, and where vmlaned's other sockets to it go.
func (n Node) FirstAddr(v4 bool) (netip.Addr, bool) { return firstOfFamily(n.Addrs, v4) }

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

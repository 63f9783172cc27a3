package routes

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
)

// Cross-subnet modes (vmlaned --cross-subnet): what a node does for a peer
// whose address is not on a subnet of its own, where a direct route
// cannot go.
const (
	// CrossSubnetOff routes directly and reports the other peers
	// (Event VmlaneNextHopUnreachable).
	CrossSubnetOff = "off"
	// CrossSubnetBGP leaves the other peers to the fabric: vmlaned
	// announces its node's pod subnets to BGP routers (package
	// routes/bgp), which route between the subnets.
	CrossSubnetBGP = "bgp"
	// CrossSubnetVXLAN carries the traffic to the other peers through
	// vmlane's VXLAN device, as flannel's DirectRouting does: a direct
	// route to every peer that is on-link, a tunnel route to the rest,
	// decided per peer at every reconcile.
	CrossSubnetVXLAN = "vxlan"
)

// CrossSubnetModes are the values --cross-subnet takes.
var CrossSubnetModes = []string{CrossSubnetOff, CrossSubnetBGP, CrossSubnetVXLAN}

// VXLAN defaults. Flannel's VXLAN backend uses UDP port 8472 and VNI 1 and
// Calico's 4789 and VNI 4096; vmlane takes IANA's port with a VNI of its
// own, so that it sits beside either (Linux shares one UDP port between
// VXLAN devices of different VNIs).
const (
	DefaultVXLANDevice = "vmlane.vxlan"
	DefaultVXLANPort   = 4789
	DefaultVXLANVNI    = 30316 // "vl"
)

// VXLANOverhead is what VXLAN adds to every packet: the outer IP header
// (20 bytes for an IPv4 underlay, 40 for IPv6), UDP (8), VXLAN (8) and
// the inner Ethernet header (14). Pods behind a tunnel get the uplink's
// MTU minus this, so that their packets fit it once wrapped.
func VXLANOverhead(underlay netip.Addr) int {
	if underlay.Is4() {
		return 50
	}
	return 70
}

// VTEPMAC is the MAC of a node's VXLAN device, derived from its underlay
// address so that every peer computes it without asking: 0e:76 (locally
// administered, unicast) and the address's last four bytes, which are the
// whole of an IPv4 address and so unique on an IPv4 underlay.
func VTEPMAC(underlay netip.Addr) net.HardwareAddr {
	b := underlay.As16()
	return net.HardwareAddr{0x0e, 0x76, b[12], b[13], b[14], b[15]}
}

// TunnelPeer is a node that this node reaches through the tunnel: its
// device's MAC goes to its underlay address (an FDB entry), and each next
// hop of a tunnel route to it resolves to that MAC (a neighbour entry).
type TunnelPeer struct {
	Node     string
	Underlay netip.Addr
	MAC      net.HardwareAddr
	// Vias are the next hops of the routes through the tunnel to the
	// node: the network address of its pod subnet of each family
	// (Route.TunnelVia).
	Vias []netip.Addr
}

// Tunnel is the VXLAN device of a node: Ensure makes it (or checks it),
// Sync programs its peers and removes every entry of other peers, and
// accepts VXLAN from sources only (TunnelSources).
type Tunnel interface {
	// Device is the tunnel device's name, which tunnel routes name.
	Device() string
	// Local is this node's underlay address: peers are reached at
	// theirs of its family.
	Local() netip.Addr
	Ensure() error
	Sync(peers []TunnelPeer, sources []netip.Addr) error
}

// TunnelSources are the underlay addresses VXLAN may come from: every
// address of local's family that the other nodes' Node objects list
// (addrs, as Desired.Addrs has them). It is more than the peers this node
// tunnels to: a peer that routes to this node through its tunnel while
// this node reaches it directly (it has a link on the peer's subnet, the
// peer none on its) sends VXLAN that this node never answers by VXLAN.
func TunnelSources(addrs map[string][]netip.Addr, local netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, as := range addrs {
		for _, a := range as {
			if a.Is4() == local.Is4() && a != local && !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// TunnelPeers returns the peers of the routes that go through the tunnel
// (Outcome.Tunneled, whose Via is their TunnelVia): each route's node, at
// its first address of local's family, with every next hop of its routes. A node without such an address, or one whose
// device MAC would be another's (two IPv6 underlay addresses that end
// alike), is skipped with the reason.
func TunnelPeers(tunneled []Route, addrs map[string][]netip.Addr, local netip.Addr) ([]TunnelPeer, []Skip) {
	byNode := map[string]*TunnelPeer{}
	var skips []Skip
	macs := map[string]string{VTEPMAC(local).String(): ""}
	for _, r := range tunneled {
		p, ok := byNode[r.Node]
		if !ok {
			under, has := firstOfFamily(addrs[r.Node], local.Is4())
			if !has {
				skips = append(skips, Skip{Node: r.Node, Dst: r.Dst, Reason: fmt.Sprintf(
					"no %s address to reach node %s through the VXLAN tunnel (this node's underlay is %s)", family(local), r.Node, local)})
				byNode[r.Node] = nil
				continue
			}
			mac := VTEPMAC(under)
			if other, taken := macs[mac.String()]; taken {
				if other == "" {
					other = "this node"
				}
				skips = append(skips, Skip{Node: r.Node, Dst: r.Dst, Reason: fmt.Sprintf(
					"node %s's VXLAN MAC %s (from underlay address %s) is %s's too: no tunnel to it", r.Node, mac, under, other)})
				byNode[r.Node] = nil
				continue
			}
			macs[mac.String()] = r.Node
			p = &TunnelPeer{Node: r.Node, Underlay: under, MAC: mac}
			byNode[r.Node] = p
		}
		if p != nil && !slices.Contains(p.Vias, r.Via) {
			p.Vias = append(p.Vias, r.Via)
		}
	}
	out := make([]TunnelPeer, 0, len(byNode))
	for _, p := range byNode {
		if p != nil {
			slices.SortFunc(p.Vias, netip.Addr.Compare)
			out = append(out, *p)
		}
	}
	slices.SortFunc(out, func(a, b TunnelPeer) int { return a.Underlay.Compare(b.Underlay) })
	return out, skips
}

// onLinkReplacer is a routeTable that can install a route through a
// device whatever its next hop's reachability (ip route replace DST via
// VIA dev DEV onlink): the tunnel routes.
type onLinkReplacer interface {
	ReplaceOnLink(dst netip.Prefix, via netip.Addr, dev string, proto int) error
}

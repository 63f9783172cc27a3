// Package ndproxy answers, on the node a VM moved to, its guest's IPv6
// neighbour solicitations for the addresses of its home subnet, and sends
// it the router advertisements of its home.
//
// A guest that live-migrated (or moved) from its home node keeps its
// addresses and its idea of its link: its home node's IPv6 pod subnet is
// on-link for it, so it reaches that subnet's pods by neighbour discovery.
// On the node it runs on now nobody has those addresses, and Linux proxies
// NDP per address only (`ip -6 neigh add proxy`), not for a whole subnet
// the node does not know the members of, so once its neighbour entries for
// them expired (seconds after a migration) the guest lost its home node's
// pods over IPv6. IPv4 has no such gap: the bridge's proxy ARP answers for
// every address the node routes off the bridge.
//
// A Responder watches the bridge ports of such guests (Guest) for
// neighbour solicitations, multicast or unicast, and answers each one for
// an address of the guest's home subnet that is not on this bridge with a
// neighbour advertisement naming the bridge's MAC, sent out of the guest's
// port only. The guest then sends to the node, which routes the packets
// home.
//
// The node's own router advertisements, which announce its pod subnet
// on-link, must not reach such a guest (the table bridge vmlane-away drops
// them on its port): the guest would resolve this node's pods by neighbour
// discovery, and keep doing so, unanswered, once it moved on. The Responder
// sends it, out of its port only, the advertisements it had at home
// instead: the same router, its home subnet on-link (periodically, and in
// answer to its router solicitations), so that its default router and
// home subnet never expire while it is away.
//
// The pure parts, Parse, Advert, IsRouterSolicit and RouterAdvert, are here;
// the sockets are Linux's (responder_linux.go).
package ndproxy

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"

	"github.com/vmlane/vmlane/internal/rawip"
)

// Sizes and numbers of RFC 4861 §4.3 and §4.4.
const (
	etherLen    = 14
	icmpRS      = 133
	ipv6Len     = 40
	icmpNS      = 135
	icmpNA      = 136
	nsLen       = 24 // type, code, checksum, reserved, target
	protoICMPv6 = 58
	optTargetLL = 2
	naSolicited = 0x40
	naOverride  = 0x20
)

// Solicit is a neighbour solicitation as it came from a guest.
type Solicit struct {
	// SrcMAC is the frame's source.
	SrcMAC net.HardwareAddr
	// Src is the packet's source: the unspecified address for a
	// duplicate address detection probe.
	Src netip.Addr
	// Dst is the solicited-node multicast address, or the target itself
	// for a unicast probe of an existing entry.
	Dst netip.Addr
	// Target is the address asked for.
	Target netip.Addr
}

// Parse reads an Ethernet frame and reports whether it is a valid neighbour
// solicitation (RFC 4861 §7.1.1): IPv6 with no extension headers, hop limit
// 255, ICMPv6 type 135 code 0, a correct checksum, a unicast target, and no
// source link-layer option from the unspecified address.
func Parse(frame []byte) (Solicit, bool) {
	if len(frame) < etherLen+ipv6Len+nsLen || binary.BigEndian.Uint16(frame[12:]) != 0x86dd {
		return Solicit{}, false
	}
	ip := frame[etherLen:]
	if ip[0]>>4 != 6 || ip[6] != protoICMPv6 || ip[7] != 255 {
		return Solicit{}, false
	}
	plen := int(binary.BigEndian.Uint16(ip[4:]))
	if plen < nsLen || ipv6Len+plen > len(ip) {
		return Solicit{}, false
	}
	src := netip.AddrFrom16([16]byte(ip[8:24]))
	dst := netip.AddrFrom16([16]byte(ip[24:40]))
	icmp := ip[ipv6Len : ipv6Len+plen]
	if icmp[0] != icmpNS || icmp[1] != 0 || checksum(src, dst, icmp) != 0 {
		return Solicit{}, false
	}
	target := netip.AddrFrom16([16]byte(icmp[8:24]))
	if target.IsMulticast() || target.IsUnspecified() || target.IsLoopback() {
		return Solicit{}, false
	}
	// Options: each a type, a length in units of 8 octets (never 0).
	for opts := icmp[nsLen:]; len(opts) > 0; {
		if len(opts) < 2 || opts[1] == 0 || int(opts[1])*8 > len(opts) {
			return Solicit{}, false
		}
		if opts[0] == 1 && src.IsUnspecified() {
			return Solicit{}, false // §7.1.1: no source link-layer option in DAD
		}
		opts = opts[int(opts[1])*8:]
	}
	if src.IsUnspecified() && !isSolicitedNode(dst, target) {
		return Solicit{}, false
	}
	return Solicit{SrcMAC: net.HardwareAddr(bytes.Clone(frame[6:12])), Src: src, Dst: dst, Target: target}, true
}

// isSolicitedNode reports whether dst is target's solicited-node multicast
// address, ff02::1:ffXX:XXXX.
func isSolicitedNode(dst, target netip.Addr) bool {
	d, t := dst.As16(), target.As16()
	want := [16]byte{0: 0xff, 1: 0x02, 11: 0x01, 12: 0xff, 13: t[13], 14: t[14], 15: t[15]}
	return d == want
}

// IsRouterSolicit reports whether an Ethernet frame is a valid router
// solicitation (RFC 4861 §6.1.1): IPv6 with no extension headers, hop limit
// 255, ICMPv6 type 133 code 0 and a correct checksum.
func IsRouterSolicit(frame []byte) bool {
	if len(frame) < etherLen+ipv6Len+8 || binary.BigEndian.Uint16(frame[12:]) != 0x86dd {
		return false
	}
	ip := frame[etherLen:]
	plen := int(binary.BigEndian.Uint16(ip[4:]))
	if ip[0]>>4 != 6 || ip[6] != protoICMPv6 || ip[7] != 255 || plen < 8 || ipv6Len+plen > len(ip) {
		return false
	}
	icmp := ip[ipv6Len : ipv6Len+plen]
	src, dst := netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
	return icmp[0] == icmpRS && icmp[1] == 0 && checksum(src, dst, icmp) == 0
}

// RouterAdvert is the Ethernet frame of a router advertisement to all nodes
// (ff02::1) from the router's link-local address src and MAC mac, around
// msg, an ICMPv6 router advertisement (ra.Build's) whose checksum it fills
// in.
func RouterAdvert(msg []byte, mac net.HardwareAddr, src netip.Addr) []byte {
	allNodes := netip.MustParseAddr("ff02::1")
	icmp := bytes.Clone(msg)
	icmp[2], icmp[3] = 0, 0
	binary.BigEndian.PutUint16(icmp[2:], checksum(src, allNodes, icmp))
	return frame(net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}, mac, src, allNodes, icmp)
}

// frame is the Ethernet frame of an ICMPv6 message from src (and srcMAC)
// to dst (and dstMAC), hop limit 255 as neighbour discovery wants.
func frame(dstMAC, srcMAC net.HardwareAddr, src, dst netip.Addr, icmp []byte) []byte {
	return rawip.Ether(dstMAC, srcMAC, rawip.TypeIPv6, rawip.IPv6(src, dst, protoICMPv6, 255, icmp))
}

// Guest is a guest that moved in: its bridge port and what the node answers
// for on it.
type Guest struct {
	// Port is the bridge port of the guest's pod (the host end of its
	// veth).
	Port string
	// MAC is the guest's: solicitations from another source are not
	// answered.
	MAC net.HardwareAddr
	// Home is the guest's home node's IPv6 pod subnet.
	Home netip.Prefix
}

// Equal reports whether g and o are the same guest on the same port.
func (g Guest) Equal(o Guest) bool {
	return g.Port == o.Port && g.Home == o.Home && bytes.Equal(g.MAC, o.MAC)
}

// Answers reports whether the node answers s for g: it came from the
// guest's MAC and an address (not a duplicate address detection probe),
// and asks for an address of its home subnet that is not on this bridge
// (onBridge: the guest's own address, and those of every other pod and VM
// here, which answer for themselves).
func (g Guest) Answers(s Solicit, onBridge func(netip.Addr) bool) bool {
	return bytes.Equal(s.SrcMAC, g.MAC) && !s.Src.IsUnspecified() &&
		g.Home.Contains(s.Target) && !onBridge(s.Target)
}

// Advert is the neighbour advertisement that answers s from the node
// (RFC 4861 §7.2.4, as a proxy): to the solicitation's source and source
// MAC, from the target address and mac, solicited and override set, router
// clear (the target is a pod, not the guest's router), with mac in its
// target link-layer option. The whole Ethernet frame.
func Advert(s Solicit, mac net.HardwareAddr) []byte {
	icmp := make([]byte, nsLen+8)
	icmp[0] = icmpNA
	icmp[4] = naSolicited | naOverride
	t := s.Target.As16()
	copy(icmp[8:], t[:])
	icmp[nsLen] = optTargetLL
	icmp[nsLen+1] = 1
	copy(icmp[nsLen+2:], mac[:6])
	binary.BigEndian.PutUint16(icmp[2:], checksum(s.Target, s.Src, icmp))
	return frame(s.SrcMAC, mac, s.Target, s.Src, icmp)
}

// checksum is the ICMPv6 checksum of msg between src and dst (RFC 4443
// §2.3): 0 over a message whose checksum is right.
func checksum(src, dst netip.Addr, msg []byte) uint16 {
	return rawip.Checksum(append(rawip.PseudoHeader6(src, dst, protoICMPv6, len(msg)), msg...))
}

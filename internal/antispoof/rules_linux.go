package antispoof

import (
	"encoding/binary"

	"github.com/google/nftables/expr"
)

// The table's chains. ports is the base chain, on the bridge's prerouting
// hook, which every frame entering a port passes whether the bridge
// forwards it or delivers it to the node.
const (
	chainPorts = "ports"
	chainIPv4  = "ipv4"
	chainARP   = "arp"
	chainIPv6  = "ipv6"
)

// The sets; see the package comment.
const (
	setPorts  = "ports"
	setMACs   = "macs"
	setAddrs  = "addrs"
	setAddrs6 = "addrs6"
	// setRouters6 holds the node's own IPv6 link-local addresses on the
	// bridge (Table.Routers6): the pods' router, which no port may send
	// as or advertise.
	setRouters6 = "routers6"
)

// Registers. A concatenation is looked up from consecutive 32-bit
// registers (NFT_REG32_00 is 8): the interface name takes four, a MAC two,
// an IPv4 address one, an IPv6 address four.
const (
	regName = 8
	regMAC  = 12
	regIP   = 14
	regOne  = 1 // the 16-byte register 1, for single comparisons
)

// Ethertypes and protocol numbers the rules match.
const (
	etherIPv4   = 0x0800
	etherARP    = 0x0806
	etherIPv6   = 0x86dd
	etherRARP   = 0x8035
	protoUDP    = 17
	protoICMPv6 = 58

	portDHCPServer   = 67
	portDHCPv6Server = 547

	icmpv6RouterSolicit  = 133
	icmpv6RouterAdvert   = 134
	icmpv6NeighSolicit   = 135
	icmpv6NeighAdvert    = 136
	icmpv6Redirect       = 137
	ndOptSourceLLAddr    = 1
	ndOptTargetLLAddr    = 2
	ndTarget             = 8  // the target address of an NS or NA (RFC 4861 4.3, 4.4)
	ndOptions            = 24 // an NS's or NA's first option: after the target
	rsOptions            = 8  // an RS's first option: after 4 reserved bytes (RFC 4861 4.1)
	ndLLAddrOptionLength = 8  // an Ethernet link-layer address option: type, length 1, the MAC

	// dhcpChaddr is where a DHCP message's chaddr starts in the UDP
	// packet: the 8-byte UDP header, then op, htype, hlen, hops (4),
	// xid (4), secs and flags (4), ciaddr, yiaddr, siaddr, giaddr (16).
	dhcpChaddr = 8 + 28
)

// rule is one rule of the table: a name, which is also its comment and
// what Verify checks it by, and its expressions.
type rule struct {
	name  string
	exprs []expr.Any
}

type chainSpec struct {
	name  string
	rules []rule
}

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }

func loadName(reg uint32) expr.Any { return &expr.Meta{Key: expr.MetaKeyIIFNAME, Register: reg} }

func load(base expr.PayloadBase, off, n, reg uint32) expr.Any {
	return &expr.Payload{OperationType: expr.PayloadLoad, DestRegister: reg, Base: base, Offset: off, Len: n}
}

func eq(reg uint32, data []byte) expr.Any {
	return &expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: data}
}

func in(set string, reg uint32) expr.Any { return &expr.Lookup{SourceRegister: reg, SetName: set} }

func notIn(set string, reg uint32) expr.Any {
	return &expr.Lookup{SourceRegister: reg, SetName: set, Invert: true}
}

// The verdicts. Drops count, so `nft list table bridge vmlane` (or the
// counters vmlaned reads) shows what a guest tried.
func drop() []expr.Any      { return []expr.Any{counter(), dropVerdict()} }
func counter() expr.Any     { return &expr.Counter{} }
func dropVerdict() expr.Any { return &expr.Verdict{Kind: expr.VerdictDrop} }
func accept() expr.Any      { return &expr.Verdict{Kind: expr.VerdictAccept} }
func jump(chain string) expr.Any {
	return &expr.Verdict{Kind: expr.VerdictJump, Chain: chain}
}

func udpPort(off uint32, port uint16) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: regOne}, eq(regOne, []byte{protoUDP}),
		load(expr.PayloadBaseTransportHeader, off, 2, regOne), eq(regOne, be16(port)),
	}
}

func icmpv6Type(t byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: regOne}, eq(regOne, []byte{protoICMPv6}),
		load(expr.PayloadBaseTransportHeader, 0, 1, regOne), eq(regOne, []byte{t}),
	}
}

// icmpv6Types matches ICMPv6 messages of types from to to.
func icmpv6Types(from, to byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: regOne}, eq(regOne, []byte{protoICMPv6}),
		load(expr.PayloadBaseTransportHeader, 0, 1, regOne),
		&expr.Range{Op: expr.CmpOpEq, Register: regOne, FromData: []byte{from}, ToData: []byte{to}},
	}
}

// beyond matches a packet whose transport payload goes past off bytes: a
// load past the end of the packet ends the rule unmatched, and any byte
// it reads is >= 0.
func beyond(off uint32) []expr.Any {
	return one(load(expr.PayloadBaseTransportHeader, off, 1, regOne),
		&expr.Cmp{Op: expr.CmpOpGte, Register: regOne, Data: []byte{0}})
}

// ndLLAddr matches an ND message whose option at off is a link-layer
// address option of a type from..to whose MAC is not the port's (the
// macs set, keyed by the port's name).
func ndLLAddr(off uint32, from, to byte) []expr.Any {
	return one(load(expr.PayloadBaseTransportHeader, off, 1, regOne),
		&expr.Range{Op: expr.CmpOpEq, Register: regOne, FromData: []byte{from}, ToData: []byte{to}},
		loadName(regName), load(expr.PayloadBaseTransportHeader, off+2, 6, regMAC), notIn(setMACs, regName))
}

func cat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func one(e ...expr.Any) []expr.Any { return e }

var (
	srcMAC  = one(load(expr.PayloadBaseLLHeader, 6, 6, regMAC))
	srcIPv4 = one(load(expr.PayloadBaseNetworkHeader, 12, 4, regIP))
	srcIPv6 = one(load(expr.PayloadBaseNetworkHeader, 8, 16, regIP))
	zero4   = []byte{0, 0, 0, 0}
	zero16  = make([]byte, 16)
)

// linkLocal6 matches an IPv6 source in fe80::/10.
func linkLocal6() []expr.Any {
	return one(load(expr.PayloadBaseNetworkHeader, 8, 2, regOne),
		&expr.Bitwise{SourceRegister: regOne, DestRegister: regOne, Len: 2, Mask: []byte{0xff, 0xc0}, Xor: []byte{0, 0}},
		eq(regOne, []byte{0xfe, 0x80}))
}

// notLinkLocalTarget matches an ND target outside fe80::/10.
func notLinkLocalTarget() []expr.Any {
	return one(load(expr.PayloadBaseTransportHeader, ndTarget, 2, regOne),
		&expr.Bitwise{SourceRegister: regOne, DestRegister: regOne, Len: 2, Mask: []byte{0xff, 0xc0}, Xor: []byte{0, 0}},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: regOne, Data: []byte{0xfe, 0x80}})
}

// layout is the whole table: its chains, base chain first, in the order
// they are created.
var layout = []chainSpec{
	{chainPorts, []rule{
		{"unchecked port", one(loadName(regOne), notIn(setPorts, regOne), accept())},
		{"source MAC", cat(one(loadName(regName)), srcMAC, one(notIn(setMACs, regName)), drop())},
		{"to ipv4", one(load(expr.PayloadBaseLLHeader, 12, 2, regOne), eq(regOne, be16(etherIPv4)), jump(chainIPv4))},
		{"to arp", one(load(expr.PayloadBaseLLHeader, 12, 2, regOne), eq(regOne, be16(etherARP)), jump(chainARP))},
		{"to ipv6", one(load(expr.PayloadBaseLLHeader, 12, 2, regOne), eq(regOne, be16(etherIPv6)), jump(chainIPv6))},
		// QEMU announces a guest's NIC where a live migration brought it
		// with RARP requests for the NIC's own MAC (sender and target),
		// no address, as soon as the guest runs, without the guest's
		// help: the target's bridge learns the MAC from them, which is
		// what moves the VM's routes there. Any other RARP is dropped.
		{"rarp self-announce", cat(
			one(load(expr.PayloadBaseLLHeader, 12, 2, regOne), eq(regOne, be16(etherRARP))),
			// Ethernet, IPv4, their lengths, and "request reverse".
			one(load(expr.PayloadBaseLLHeader, 14, 8, regOne), eq(regOne, []byte{0, 1, 8, 0, 6, 4, 0, 3})),
			one(loadName(regName), load(expr.PayloadBaseLLHeader, 22, 6, regMAC), in(setMACs, regName)),
			one(load(expr.PayloadBaseLLHeader, 28, 4, regOne), eq(regOne, zero4)),
			one(loadName(regName), load(expr.PayloadBaseLLHeader, 32, 6, regMAC), in(setMACs, regName)),
			one(load(expr.PayloadBaseLLHeader, 38, 4, regOne), eq(regOne, zero4), accept()))},
		{"other ethertype", drop()},
	}},
	{chainIPv4, []rule{
		// A DHCP client message names its client in chaddr; the server
		// keys leases on it, so it must be the sender's own MAC.
		{"dhcp chaddr", cat(udpPort(2, portDHCPServer),
			one(loadName(regName), load(expr.PayloadBaseTransportHeader, dhcpChaddr, 6, regMAC), notIn(setMACs, regName)), drop())},
		{"dhcp from 0.0.0.0", cat(udpPort(2, portDHCPServer),
			one(load(expr.PayloadBaseNetworkHeader, 12, 4, regOne), eq(regOne, zero4), accept()))},
		{"source address", cat(one(loadName(regName)), srcMAC, srcIPv4, one(notIn(setAddrs, regName)), drop())},
		{"dhcp server", cat(udpPort(0, portDHCPServer), drop())},
		{"ipv4 ok", one(accept())},
	}},
	{chainARP, []rule{
		// Ethernet/IPv4 ARP only: htype 1, ptype 0x0800, hlen 6, plen 4;
		// other formats would put the sender fields elsewhere.
		{"arp format", cat(one(load(expr.PayloadBaseNetworkHeader, 0, 6, regOne),
			&expr.Cmp{Op: expr.CmpOpNeq, Register: regOne, Data: []byte{0, 1, 8, 0, 6, 4}}), drop())},
		{"arp sender", one(loadName(regName), load(expr.PayloadBaseNetworkHeader, 8, 6, regMAC),
			load(expr.PayloadBaseNetworkHeader, 14, 4, regIP), in(setAddrs, regName), accept())},
		// RFC 5227 probes (sender 0.0.0.0) from the port's own MAC:
		// DHCP clients send them before they use an address.
		{"arp probe", one(load(expr.PayloadBaseNetworkHeader, 14, 4, regOne), eq(regOne, zero4),
			loadName(regName), load(expr.PayloadBaseNetworkHeader, 8, 6, regMAC), in(setMACs, regName), accept())},
		{"arp spoof", drop()},
	}},
	{chainIPv6, []rule{
		{"router advertisement", cat(icmpv6Type(icmpv6RouterAdvert), drop())},
		{"redirect", cat(icmpv6Type(icmpv6Redirect), drop())},
		{"dhcpv6 server", cat(udpPort(0, portDHCPv6Server), drop())},
		// The pods' router is the node's link-local address on the
		// bridge: a guest sending from it (an NS from it puts the
		// guest's MAC in its neighbours' caches for their router), or
		// advertising it, would take their off-link traffic.
		{"router's address", one(load(expr.PayloadBaseNetworkHeader, 8, 16, regOne), in(setRouters6, regOne), counter(), dropVerdict())},
		{"na of the router", cat(icmpv6Type(icmpv6NeighAdvert),
			one(load(expr.PayloadBaseTransportHeader, ndTarget, 16, regOne), in(setRouters6, regOne)), drop())},
		// Neighbour discovery (RFC 4861 4.4): an NA moves the receiver's
		// neighbour entry for its target to the MAC it carries, so its
		// target must be the port's own IPv6 address; a link-local
		// target passes, as link-local sources do (neither is pinned:
		// the guest picks its own).
		{"na target", cat(icmpv6Type(icmpv6NeighAdvert), notLinkLocalTarget(),
			one(loadName(regName)), srcMAC, one(load(expr.PayloadBaseTransportHeader, ndTarget, 16, regIP), notIn(setAddrs6, regName)), drop())},
		// The link-layer address options of an NS (source) and NA
		// (target), and of an RS, are what neighbours and the node put
		// in their caches: they must be the frame's own MAC. Stacks
		// send at most one option in these (the address, or a DAD
		// nonce, RFC 7527); a message with more is dropped rather than
		// parsed, as nftables cannot walk a list of options.
		{"nd options", cat(icmpv6Types(icmpv6NeighSolicit, icmpv6NeighAdvert), beyond(ndOptions+ndLLAddrOptionLength), drop())},
		{"nd link-layer address", cat(icmpv6Types(icmpv6NeighSolicit, icmpv6NeighAdvert), ndLLAddr(ndOptions, ndOptSourceLLAddr, ndOptTargetLLAddr), drop())},
		{"rs options", cat(icmpv6Type(icmpv6RouterSolicit), beyond(rsOptions+ndLLAddrOptionLength), drop())},
		{"rs link-layer address", cat(icmpv6Type(icmpv6RouterSolicit), ndLLAddr(rsOptions, ndOptSourceLLAddr, ndOptSourceLLAddr), drop())},
		// DAD probes and MLD reports before an address is up come
		// from ::, DHCPv6 clients and neighbour discovery from the
		// link-local address the guest made itself.
		{"ipv6 from ::", one(load(expr.PayloadBaseNetworkHeader, 8, 16, regOne), eq(regOne, zero16), accept())},
		{"ipv6 link-local source", cat(linkLocal6(), one(accept()))},
		{"ipv6 source address", cat(one(loadName(regName)), srcMAC, srcIPv6, one(in(setAddrs6, regName), accept()))},
		{"ipv6 spoof", drop()},
	}},
}

// The netdev table: a base chain per checked port on the ingress hook of
// its host veth. The kernel's bridge handles frames to the IEEE 802.1D
// link-local group addresses (01:80:c2:00:00:00 to 0f) before, or instead
// of, its prerouting hook: it learns the source of some of them straight
// into its forwarding database (br_handle_frame, __br_handle_local_finish)
// and passes others up to the port's own stack. The ingress hook runs
// before the bridge sees any frame (__netif_receive_skb_core calls it
// before the port's rx_handler), so these rules hold whatever the
// destination.
const (
	// ingressPriority runs the chain before any other ingress chain.
	ingressPriority = -500
	// netdevMACs is the netdev table's copy of the macs set (a set
	// belongs to one table, and the two are of different families).
	netdevMACs = setMACs
)

var linkLocalGroup = []byte{0x01, 0x80, 0xc2, 0x00, 0x00, 0x00}

var ingressRules = []rule{
	// Nothing a guest may send goes to the bridge's own protocols (STP,
	// pause, LACP, 802.1X, LLDP): with STP off the bridge would forward
	// 00 through prerouting, the rest it keeps or hands to the port's
	// own stack unchecked.
	{"link-local group", one(load(expr.PayloadBaseLLHeader, 0, 6, regOne),
		&expr.Bitwise{SourceRegister: regOne, DestRegister: regOne, Len: 6,
			Mask: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xf0}, Xor: make([]byte, 6)},
		eq(regOne, linkLocalGroup), counter(), dropVerdict())},
	{"source MAC", cat(one(loadName(regName)), srcMAC, one(notIn(netdevMACs, regName)), drop())},
}

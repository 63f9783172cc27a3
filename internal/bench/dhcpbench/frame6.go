package main

import (
	"encoding/binary"
	"net"
	"net/netip"
)

// The DHCPv6 client's frame: Ethernet II, IPv6 without extension headers,
// UDP, from the client's EUI-64 link-local address, port 546, to
// All_DHCP_Relay_Agents_and_Servers (ff02::1:2), port 547 (RFC 8415 §7).
const (
	ipv6Len   = 40
	head6Len  = ethLen + ipv6Len + udpLen
	etherIP6  = 0x86dd
	client6   = 546
	server6   = 547
	hopLimit6 = 1 // link-scope multicast never leaves the link
)

var allServers6 = netip.MustParseAddr("ff02::1:2")

// linkLocal is the EUI-64 link-local address of mac (RFC 4291 §2.5.1),
// what a client's kernel gives its NIC.
func linkLocal(mac net.HardwareAddr) netip.Addr {
	var a [16]byte
	a[0], a[1] = 0xfe, 0x80
	a[8], a[9], a[10] = mac[0]^0x02, mac[1], mac[2]
	a[11], a[12] = 0xff, 0xfe
	a[13], a[14], a[15] = mac[3], mac[4], mac[5]
	return netip.AddrFrom16(a)
}

// clientFrame6 wraps a DHCPv6 payload from mac, UDP checksum filled in.
func clientFrame6(mac net.HardwareAddr, payload []byte) []byte {
	b := make([]byte, head6Len+len(payload))
	dst := allServers6.As16()
	// 33:33 and the group's low 32 bits (RFC 2464 §7).
	copy(b[0:6], []byte{0x33, 0x33, dst[12], dst[13], dst[14], dst[15]})
	copy(b[6:12], mac)
	binary.BigEndian.PutUint16(b[12:14], etherIP6)

	ip := b[ethLen : ethLen+ipv6Len]
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:6], uint16(udpLen+len(payload)))
	ip[6] = protoUDP
	ip[7] = hopLimit6
	src := linkLocal(mac).As16()
	copy(ip[8:24], src[:])
	copy(ip[24:40], dst[:])

	udp := b[ethLen+ipv6Len:]
	binary.BigEndian.PutUint16(udp[0:2], client6)
	binary.BigEndian.PutUint16(udp[2:4], server6)
	binary.BigEndian.PutUint16(udp[4:6], uint16(udpLen+len(payload)))
	copy(udp[udpLen:], payload)
	binary.BigEndian.PutUint16(udp[6:8], udpChecksum(ip[8:24], ip[24:40], udp))
	return b
}

// serverPayload6 returns the UDP payload of an IPv6 frame to the DHCPv6
// client port, or false for anything else; it checks every length before
// it slices, as it reads frames off the wire.
func serverPayload6(frame []byte) ([]byte, bool) {
	if len(frame) < head6Len || binary.BigEndian.Uint16(frame[12:14]) != etherIP6 {
		return nil, false
	}
	ip := frame[ethLen:]
	if ip[0]>>4 != 6 || ip[6] != protoUDP {
		return nil, false
	}
	plen := int(binary.BigEndian.Uint16(ip[4:6]))
	if plen < udpLen || ipv6Len+plen > len(ip) {
		return nil, false
	}
	udp := ip[ipv6Len : ipv6Len+plen]
	if binary.BigEndian.Uint16(udp[2:4]) != client6 {
		return nil, false
	}
	n := int(binary.BigEndian.Uint16(udp[4:6]))
	if n < udpLen || n > len(udp) {
		return nil, false
	}
	return udp[udpLen:n], true
}

package main

import (
	"encoding/binary"
	"net"
)

// Frame layout of a client's DHCP packet: Ethernet II, IPv4 without
// options, UDP. Clients in INIT state have no address, so they send from
// 0.0.0.0:68 to 255.255.255.255:67 (RFC 2131 §4.1), and the load
// generator writes whole frames to give each its own source MAC.
const (
	ethLen   = 14
	ipv4Len  = 20
	udpLen   = 8
	headLen  = ethLen + ipv4Len + udpLen
	etherIP4 = 0x0800
	protoUDP = 17

	clientPort = 68
	serverPort = 67
)

// clientFrame wraps a DHCP payload from mac in a broadcast frame, with the
// IPv4 header checksum and the UDP checksum filled in, as a real client's
// stack (udhcpc's raw socket, dhclient's BPF writer) sends it.
func clientFrame(mac net.HardwareAddr, payload []byte) []byte {
	b := make([]byte, headLen+len(payload))
	copy(b[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(b[6:12], mac)
	binary.BigEndian.PutUint16(b[12:14], etherIP4)

	ip := b[ethLen : ethLen+ipv4Len]
	ip[0] = 0x45 // version 4, 5 words
	binary.BigEndian.PutUint16(ip[2:4], uint16(ipv4Len+udpLen+len(payload)))
	ip[8] = 64 // TTL
	ip[9] = protoUDP
	// ip[12:16] source 0.0.0.0, destination all-ones:
	copy(ip[16:20], []byte{255, 255, 255, 255})
	binary.BigEndian.PutUint16(ip[10:12], ^sum16(0, ip))

	udp := b[ethLen+ipv4Len:]
	binary.BigEndian.PutUint16(udp[0:2], clientPort)
	binary.BigEndian.PutUint16(udp[2:4], serverPort)
	binary.BigEndian.PutUint16(udp[4:6], uint16(udpLen+len(payload)))
	copy(udp[udpLen:], payload)
	binary.BigEndian.PutUint16(udp[6:8], udpChecksum(ip[12:16], ip[16:20], udp))
	return b
}

// sum16 adds b to the one's-complement sum acc as 16-bit big-endian words
// (RFC 1071), an odd last byte padded with zero.
func sum16(acc uint32, b []byte) uint16 {
	for len(b) >= 2 {
		acc += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		acc += uint32(b[0]) << 8
	}
	for acc > 0xffff {
		acc = acc>>16 + acc&0xffff
	}
	return uint16(acc)
}

// udpChecksum is the UDP checksum over the pseudo-header of src and dst
// (IPv4 or IPv6 addresses: the one's-complement sum of either
// pseudo-header is the addresses', the protocol's and the length's) and
// seg, whose checksum field must be zero. A computed zero is sent as all
// ones (RFC 768; in IPv6 a checksum is mandatory, RFC 8200 §8.1).
func udpChecksum(src, dst, seg []byte) uint16 {
	var acc uint32
	acc += uint32(sum16(0, src)) + uint32(sum16(0, dst))
	acc += protoUDP + uint32(len(seg))
	c := ^sum16(acc+uint32(sum16(0, seg)), nil)
	if c == 0 {
		return 0xffff
	}
	return c
}

// serverPayload returns the UDP payload of a frame sent to the client
// port, or false for anything else: other protocols, fragments, truncated
// or inconsistent headers. It reads frames off the wire, so it checks every
// length before it slices.
func serverPayload(frame []byte) ([]byte, bool) {
	if len(frame) < headLen || binary.BigEndian.Uint16(frame[12:14]) != etherIP4 {
		return nil, false
	}
	ip := frame[ethLen:]
	ihl := int(ip[0]&0x0f) * 4
	if ip[0]>>4 != 4 || ihl < ipv4Len || ip[9] != protoUDP {
		return nil, false
	}
	if binary.BigEndian.Uint16(ip[6:8])&0x3fff != 0 { // MF or an offset
		return nil, false
	}
	total := int(binary.BigEndian.Uint16(ip[2:4]))
	if total < ihl+udpLen || total > len(ip) {
		return nil, false
	}
	udp := ip[ihl:total]
	if binary.BigEndian.Uint16(udp[2:4]) != clientPort {
		return nil, false
	}
	n := int(binary.BigEndian.Uint16(udp[4:6]))
	if n < udpLen || n > len(udp) {
		return nil, false
	}
	return udp[udpLen:n], true
}

// Package rawip builds Ethernet frames carrying IPv4 UDP and IPv6, for the
// few places vmlane sends a frame itself rather than through the kernel's
// stack: the DHCP server's replies and the moved-in guests' neighbour
// discovery answers (internal/ndproxy) out of one bridge port, and tests
// that play a hostile guest. Standard library only.
package rawip

import (
	"encoding/binary"
	"net"
	"net/netip"
)

// Ethernet ethertypes.
const (
	TypeIPv4 = 0x0800
	TypeARP  = 0x0806
	TypeIPv6 = 0x86dd
	TypeVLAN = 0x8100
)

// Broadcast is ff:ff:ff:ff:ff:ff.
var Broadcast = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// Ether builds an Ethernet frame.
func Ether(dst, src net.HardwareAddr, etherType uint16, payload []byte) []byte {
	b := make([]byte, 0, 14+len(payload))
	b = append(append(append(b, dst[:6]...), src[:6]...), byte(etherType>>8), byte(etherType))
	return append(b, payload...)
}

// UDP4 builds an IPv4 packet (TTL 64, no options) carrying a UDP
// datagram, both checksums filled in.
func UDP4(src, dst netip.Addr, sport, dport uint16, payload []byte) []byte {
	udp := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], dport)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	udp = append(udp, payload...)
	s, d := src.As4(), dst.As4()
	pseudo := append(append(append(make([]byte, 0, 12+len(udp)), s[:]...), d[:]...), 0, 17, byte(len(udp)>>8), byte(len(udp)))
	sum := Checksum(append(pseudo, udp...))
	if sum == 0 {
		sum = 0xffff // RFC 768: a computed zero is sent as all ones
	}
	binary.BigEndian.PutUint16(udp[6:], sum)
	return IPv4(src, dst, 17, udp)
}

// IPv4 builds an IPv4 packet of protocol proto around payload.
func IPv4(src, dst netip.Addr, proto byte, payload []byte) []byte {
	h := make([]byte, 20, 20+len(payload))
	h[0] = 0x45
	binary.BigEndian.PutUint16(h[2:], uint16(20+len(payload)))
	h[8] = 64
	h[9] = proto
	s, d := src.As4(), dst.As4()
	copy(h[12:], s[:])
	copy(h[16:], d[:])
	binary.BigEndian.PutUint16(h[10:], Checksum(h))
	return append(h, payload...)
}

// Checksum is the Internet checksum (RFC 1071) of b.
func Checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// IPv6 builds an IPv6 packet (no extension headers) of next header proto
// and hop limit hop around payload.
func IPv6(src, dst netip.Addr, proto, hop byte, payload []byte) []byte {
	h := make([]byte, 40, 40+len(payload))
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(len(payload)))
	h[6], h[7] = proto, hop
	s, d := src.As16(), dst.As16()
	copy(h[8:], s[:])
	copy(h[24:], d[:])
	return append(h, payload...)
}

// PseudoHeader6 is the IPv6 pseudo-header of an upper-layer checksum (RFC
// 8200 §8.1) for n bytes of next header proto from src to dst.
func PseudoHeader6(src, dst netip.Addr, proto byte, n int) []byte {
	s, d := src.As16(), dst.As16()
	b := append(append(make([]byte, 0, 40), s[:]...), d[:]...)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	return append(b, 0, 0, 0, proto)
}

// ARP builds an Ethernet/IPv4 ARP packet: op 1 is a request, 2 a reply.
func ARP(op uint16, sha net.HardwareAddr, spa netip.Addr, tha net.HardwareAddr, tpa netip.Addr) []byte {
	b := make([]byte, 0, 28)
	b = append(b, 0, 1, 8, 0, 6, 4, byte(op>>8), byte(op))
	s, t := spa.As4(), tpa.As4()
	b = append(append(b, sha[:6]...), s[:]...)
	return append(append(b, tha[:6]...), t[:]...)
}

// ParseARP reads an Ethernet/IPv4 ARP packet; ok is false for anything
// else.
func ParseARP(b []byte) (op uint16, sha net.HardwareAddr, spa netip.Addr, ok bool) {
	if len(b) < 28 || string(b[:6]) != "\x00\x01\x08\x00\x06\x04" {
		return 0, nil, netip.Addr{}, false
	}
	return binary.BigEndian.Uint16(b[6:8]), net.HardwareAddr(b[8:14]), netip.AddrFrom4([4]byte(b[14:18])), true
}

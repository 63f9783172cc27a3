package dhcp

import (
	"encoding/binary"
	"net/netip"
)

// parseUDP4 takes the source, the destination address and the UDP
// payload out of an IPv4 packet: a whole one (not a fragment) whose
// protocol is UDP, with its header length and lengths in bounds.
func parseUDP4(b []byte) (src netip.AddrPort, dst netip.Addr, payload []byte, ok bool) {
	if len(b) < 20 || b[0]>>4 != 4 || b[9] != 17 /* UDP */ {
		return src, dst, nil, false
	}
	ihl := int(b[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(b[2:4]))
	if ihl < 20 || total < ihl+8 || total > len(b) || binary.BigEndian.Uint16(b[6:8])&0x3fff != 0 {
		return src, dst, nil, false // a fragment, or lengths out of bounds
	}
	udp := b[ihl:total]
	ulen := int(binary.BigEndian.Uint16(udp[4:6]))
	if ulen < 8 || ulen > len(udp) {
		return src, dst, nil, false
	}
	addr := netip.AddrFrom4([4]byte(b[12:16]))
	dst = netip.AddrFrom4([4]byte(b[16:20]))
	return netip.AddrPortFrom(addr, binary.BigEndian.Uint16(udp[0:2])), dst, udp[8:ulen], true
}

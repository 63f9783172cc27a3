package dhcp

import (
	"encoding/binary"
	"net/netip"
)

// parseUDP6 takes the source, the destination address and the UDP
// payload out of an IPv6 packet whose next header is UDP (the filter
// checked that and the port).
func parseUDP6(b []byte) (src netip.AddrPort, dst netip.Addr, payload []byte, ok bool) {
	if len(b) < 48 || b[0]>>4 != 6 || b[6] != 17 /* UDP */ {
		return src, dst, nil, false
	}
	ulen := int(binary.BigEndian.Uint16(b[44:46]))
	if ulen < 8 || 40+ulen > len(b) {
		return src, dst, nil, false
	}
	addr := netip.AddrFrom16([16]byte(b[8:24]))
	dst = netip.AddrFrom16([16]byte(b[24:40]))
	return netip.AddrPortFrom(addr, binary.BigEndian.Uint16(b[40:42])), dst, b[48 : 40+ulen], true
}

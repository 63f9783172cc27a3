package dhcp

import (
	"encoding/binary"
	"net/netip"
)

// parseUDP6 takes the source and the UDP payload out of an IPv6 packet
// whose next header is UDP (the filter checked that and the port).
func parseUDP6(b []byte) (src netip.AddrPort, payload []byte, ok bool) {
	if len(b) < 48 || b[0]>>4 != 6 || b[6] != 17 /* UDP */ {
		return src, nil, false
	}
	ulen := int(binary.BigEndian.Uint16(b[44:46]))
	if ulen < 8 || 40+ulen > len(b) {
		return src, nil, false
	}
	addr := netip.AddrFrom16([16]byte(b[8:24]))
	return netip.AddrPortFrom(addr, binary.BigEndian.Uint16(b[40:42])), b[48 : 40+ulen], true
}

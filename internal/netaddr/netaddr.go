// Package netaddr holds the prefix arithmetic net/netip lacks and several
// vmlane packages need (the lease allocator, the DHCP server's options,
// vmnet's reservations, the plugin, the routes). It imports the standard
// library only, so leases may use it.
package netaddr

import (
	"net"
	"net/netip"
)

// LastAddr is the last address of p: its broadcast address for IPv4.
func LastAddr(p netip.Prefix) netip.Addr {
	p = p.Masked()
	b := p.Addr().AsSlice()
	for i := range b {
		bits := p.Bits() - i*8
		switch {
		case bits >= 8:
		case bits <= 0:
			b[i] = 0xff
		default:
			b[i] |= 0xff >> bits
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// Prefix is n as a netip.Prefix, an IPv4 address unmapped: the inverse of
// IPNet. A nil or malformed n is the zero Prefix.
func Prefix(n *net.IPNet) netip.Prefix {
	if n == nil {
		return netip.Prefix{}
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones)
}

// IPNet is p as the net package (and netlink) spells a prefix.
func IPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// FromIP is ip as a netip.Addr, IPv4 unmapped (netlink hands IPv4
// addresses over in 16 bytes); zero for a nil or malformed ip.
func FromIP(ip net.IP) netip.Addr {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.Addr{}
	}
	return a.Unmap()
}

// Package netaddr holds the prefix arithmetic net/netip lacks and several
// vmlane packages need. (leases keeps its own copy: it imports nothing of
// vmlane's, so VM runtimes can depend on it alone.)
package netaddr

import "net/netip"

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

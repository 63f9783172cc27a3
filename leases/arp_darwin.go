package leases

import (
	"net"
	"net/netip"
	"syscall"
)

// readARP reads the node's ARP table: the routing socket's dump of the
// entries with RTF_LLINFO, as arp -a reads it.
func readARP() ([]Neighbor, error) {
	b, err := syscall.RouteRIB(syscall.NET_RT_FLAGS, syscall.RTF_LLINFO)
	if err != nil {
		return nil, err
	}
	return ParseARPDump(b)
}

// interfaceAddrs is the addresses of the interface with index.
func interfaceAddrs(index int) []netip.Prefix {
	ifc, err := net.InterfaceByIndex(index)
	if err != nil {
		return nil
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return nil
	}
	var out []netip.Prefix
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(n.IP)
		ones, bits := n.Mask.Size()
		if !ok || bits == 0 {
			continue
		}
		out = append(out, netip.PrefixFrom(ip.Unmap(), ones-(bits-ip.Unmap().BitLen())))
	}
	return out
}

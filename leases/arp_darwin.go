package leases

import (
	"net"
	"net/netip"
	"syscall"

	"github.com/vmlane/vmlane/internal/netaddr"
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
		if n, ok := a.(*net.IPNet); ok {
			if p := netaddr.Prefix(n); p.IsValid() {
				out = append(out, p)
			}
		}
	}
	return out
}

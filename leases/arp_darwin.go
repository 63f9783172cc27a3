package leases

import (
	"net"
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

func interfaceName(index int) string {
	ifc, err := net.InterfaceByIndex(index)
	if err != nil {
		return ""
	}
	return ifc.Name
}

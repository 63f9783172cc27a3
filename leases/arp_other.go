//go:build !darwin

package leases

import "net/netip"

// readARP has nothing to add off macOS: vmlane's lease file names every
// VM's MAC there.
func readARP() ([]Neighbor, error) { return nil, nil }

// interfaceAddrs has no interface to name off macOS.
func interfaceAddrs(int) []netip.Prefix { return nil }

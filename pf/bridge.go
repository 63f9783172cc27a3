package pf

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Iface is a network interface as CheckBridge needs it.
type Iface struct {
	Name  string
	Addrs []netip.Prefix
}

// BridgeState is what vmnet's bridge says about the subnet.
type BridgeState int

const (
	// BridgeDown: no vmnet bridge has an IPv4 address; vmnet starts its
	// shared network with the first VM that uses it.
	BridgeDown BridgeState = iota
	// BridgeMatch: a vmnet bridge has the podCIDR's gateway address.
	BridgeMatch
	// BridgeMismatch: vmnet's bridges are up on other subnets. vmnet
	// moves the shared network when its configured subnet is taken (by a
	// VPN, another interface, another vmnet network), or has not re-read
	// its configuration since vmlaned changed it: the VMs are not on the
	// podCIDR, and other nodes' routes to it lead nowhere.
	BridgeMismatch
)

// BridgeStatus is CheckBridge's finding.
type BridgeStatus struct {
	State BridgeState
	// Bridges are the vmnet bridges seen and their IPv4 addresses, for
	// the report ("bridge100 192.168.64.1/24").
	Bridges []string
}

// Message says what the status means for the node, for an Event and the
// log.
func (s BridgeStatus) Message(podCIDR netip.Prefix) string {
	gw := netip.PrefixFrom(podCIDR.Addr().Next(), podCIDR.Bits())
	switch s.State {
	case BridgeDown:
		return "vmnet's shared network is not up (no VM uses it yet)"
	case BridgeMatch:
		return fmt.Sprintf("vmnet's shared network is on podCIDR %s (%s)", podCIDR, strings.Join(s.Bridges, ", "))
	}
	return fmt.Sprintf("vmnet's shared network is not on podCIDR %s: want gateway %s on a vmnet bridge, have %s. "+
		"vmnet moves to another subnet when its own is in use (a VPN, another interface), and reads its configuration only when the shared network starts: "+
		"free the subnet and stop every VM on the shared network so vmnet restarts it", podCIDR, gw, strings.Join(s.Bridges, ", "))
}

// isVmnetBridge: vmnet names its bridges bridge100, bridge101, ...; the
// ones below 100 are the user's (Thunderbolt Bridge is bridge0).
func isVmnetBridge(name string) bool {
	n, ok := strings.CutPrefix(name, "bridge")
	if !ok {
		return false
	}
	i, err := strconv.Atoi(n)
	return err == nil && i >= 100
}

// CheckBridge compares vmnet's bridges with the podCIDR: the shared
// network is on the podCIDR when one bridge holds the gateway address with
// the podCIDR's prefix length. Pure: table tested.
func CheckBridge(ifaces []Iface, podCIDR netip.Prefix) BridgeStatus {
	want := netip.PrefixFrom(podCIDR.Addr().Next(), podCIDR.Bits())
	var st BridgeStatus
	match := false
	for _, ifc := range ifaces {
		if !isVmnetBridge(ifc.Name) {
			continue
		}
		for _, a := range ifc.Addrs {
			if !a.Addr().Is4() {
				continue
			}
			st.Bridges = append(st.Bridges, ifc.Name+" "+a.String())
			if a == want {
				match = true
			}
		}
	}
	slices.Sort(st.Bridges)
	switch {
	case match:
		st.State = BridgeMatch
	case len(st.Bridges) > 0:
		st.State = BridgeMismatch
	default:
		st.State = BridgeDown
	}
	return st
}

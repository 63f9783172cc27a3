package pf

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/vmlane/vmlane/internal/netaddr"
)

// Iface is a network interface as CheckBridge needs it.
type Iface struct {
	Name  string
	Addrs []netip.Prefix
}

// Interfaces lists the system's interfaces with their addresses, as
// CheckBridge needs them.
func Interfaces() ([]Iface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	out := make([]Iface, 0, len(ifs))
	for _, ifc := range ifs {
		pi := Iface{Name: ifc.Name}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if p := netaddr.Prefix(n); p.IsValid() {
					pi.Addrs = append(pi.Addrs, p)
				}
			}
		}
		out = append(out, pi)
	}
	return out, nil
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
	// BridgeNotServed (macOS 26 and later): vmlane-vmnet holds no network
	// for the node (it is not running, waits for the description, or
	// vmnet refused the network): no VM can join the pod network.
	BridgeNotServed
)

// BridgeStatus is CheckBridge's finding.
type BridgeStatus struct {
	State BridgeState
	// Bridges are the shared network's bridges seen and their IPv4
	// addresses, for the report ("bridge100 192.168.64.1/24"); HostOnly
	// are the other vmnet bridges with an address (host-only networks),
	// which say nothing of the shared network.
	Bridges, HostOnly []string
}

// SharedNATAnchor is the pf anchor where macOS's InternetSharing keeps the
// NAT of vmnet's shared network: `pfctl -a ANCHOR -s nat` lists a
// "no nat on BRIDGE inet from GATEWAY to SUBNET" and a "nat on UPLINK inet
// from SUBNET to any -> (UPLINK:0)" for each shared network that is up.
// A host-only network is not NATed, so it is not there.
const SharedNATAnchor = "com.apple.internet-sharing/shared_v4"

// SharedNAT is what InternetSharing's NAT anchor says of vmnet's shared
// network (ParseSharedNAT).
type SharedNAT struct {
	// Known is whether the anchor could be read: without it, every vmnet
	// bridge is taken for the shared network's (a host-only one then
	// reads as a mismatch).
	Known bool
	// Bridges are the interfaces of its "no nat on" rules, Subnets the
	// sources its "nat on" rules translate.
	Bridges []string
	Subnets []netip.Prefix
}

// ReadSharedNAT runs `pfctl -a SharedNATAnchor -s nat` through r and
// parses it; a failed run is an error (the caller counts every vmnet bridge
// as the shared network's then).
func ReadSharedNAT(r commandRunner) (SharedNAT, error) {
	out, err := r.Run("", "pfctl", "-a", SharedNATAnchor, "-s", "nat")
	if err != nil {
		return SharedNAT{}, fmt.Errorf("pfctl -a %s -s nat: %w", SharedNATAnchor, err)
	}
	return ParseSharedNAT(out), nil
}

// ParseSharedNAT reads `pfctl -a SharedNATAnchor -s nat` output. An
// anchor with no rules (no shared network up) is Known and empty.
func ParseSharedNAT(out string) SharedNAT {
	n := SharedNAT{Known: true}
	for _, line := range ParseShownRules(out) {
		f := strings.Fields(line)
		switch {
		case len(f) >= 4 && f[0] == "no" && f[1] == "nat" && f[2] == "on":
			if !slices.Contains(n.Bridges, f[3]) {
				n.Bridges = append(n.Bridges, f[3])
			}
		case len(f) >= 3 && f[0] == "nat" && f[1] == "on":
			if i := slices.Index(f, "from"); i > 0 && i+1 < len(f) {
				if p, err := netip.ParsePrefix(f[i+1]); err == nil && p.Addr().Is4() && !slices.Contains(n.Subnets, p.Masked()) {
					n.Subnets = append(n.Subnets, p.Masked())
				}
			}
		}
	}
	return n
}

// shared reports whether the vmnet bridge ifc is the shared network's by
// n: named in a "no nat on" rule, or holding an address of a subnet a
// "nat on" rule translates. Unknown n takes every vmnet bridge.
func (n SharedNAT) shared(ifc Iface) bool {
	if !n.Known || slices.Contains(n.Bridges, ifc.Name) {
		return true
	}
	for _, a := range ifc.Addrs {
		for _, s := range n.Subnets {
			if s.Contains(a.Addr()) {
				return true
			}
		}
	}
	return false
}

// Message says what the status means for the node, for an Event and the
// log.
func (s BridgeStatus) Message(podCIDR netip.Prefix) string {
	gw := netip.PrefixFrom(podCIDR.Addr().Next(), podCIDR.Bits())
	switch s.State {
	case BridgeDown:
		if len(s.HostOnly) > 0 {
			return fmt.Sprintf("vmnet's shared network is not up (no VM uses it yet); host-only networks up: %s", strings.Join(s.HostOnly, ", "))
		}
		return "vmnet's shared network is not up (no VM uses it yet)"
	case BridgeMatch:
		return fmt.Sprintf("vmnet's shared network is on podCIDR %s (%s)", podCIDR, strings.Join(s.Bridges, ", "))
	case BridgeNotServed:
		return fmt.Sprintf("vmlane-vmnet holds no network on podCIDR %s", podCIDR)
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

// CheckBridge compares vmnet's shared network with the podCIDR: it is on
// the podCIDR when one of its bridges holds the gateway address with the
// podCIDR's prefix length. Which vmnet bridges (bridge100 and up: the ones
// below are the user's) are the shared network's is what nat, read from
// InternetSharing's anchor, says: a host-only network's bridge, up while
// the shared one is down, is neither a match nor a mismatch. Pure: table
// tested.
func CheckBridge(ifaces []Iface, podCIDR netip.Prefix, nat SharedNAT) BridgeStatus {
	want := netip.PrefixFrom(podCIDR.Addr().Next(), podCIDR.Bits())
	var st BridgeStatus
	match := false
	for _, ifc := range ifaces {
		if !isVmnetBridge(ifc.Name) {
			continue
		}
		shared := nat.shared(ifc)
		for _, a := range ifc.Addrs {
			if !a.Addr().Is4() {
				continue
			}
			if !shared {
				st.HostOnly = append(st.HostOnly, ifc.Name+" "+a.String())
				continue
			}
			st.Bridges = append(st.Bridges, ifc.Name+" "+a.String())
			if a == want {
				match = true
			}
		}
	}
	slices.Sort(st.Bridges)
	slices.Sort(st.HostOnly)
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

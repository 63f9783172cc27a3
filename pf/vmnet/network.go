package vmnet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/vmlane/vmlane/pf"
)

// Spec is the network vmlane-vmnet holds: the node's podCIDR, the IPv6
// pod prefix on a dual-stack node, the MTU and the DHCP reservations vmlane
// knows (all from the description vmlaned writes, pf.Network), and whether
// vmnet's own NAT stays on.
type Spec struct {
	Subnet       netip.Prefix
	IPv6         netip.Prefix
	MTU          uint32
	Reservations []pf.Reservation
	// DisableNAT44 and DisableNAT66 turn vmnet's NAT off. By default it
	// stays on, and vmlaned's pf anchor exempts traffic to the cluster
	// from it (`no nat` rules), as on macOS 15: see docs/macos.md for why.
	DisableNAT44, DisableNAT66 bool
}

// Options are vmlane-vmnet's own choices, which the description vmlaned
// writes does not carry.
type Options struct {
	DisableNAT44, DisableNAT66 bool
}

// SpecFrom checks the description vmlaned wrote and makes the Spec. The
// error names the field and the value.
func SpecFrom(n pf.Network, o Options) (Spec, error) {
	if n.Version != 1 {
		return Spec{}, fmt.Errorf("network description: version %d, want 1", n.Version)
	}
	if n.Mode != "shared" {
		return Spec{}, fmt.Errorf("network description: mode %q, want \"shared\"", n.Mode)
	}
	if _, err := pf.SharedNetFor(n.Subnet); err != nil {
		return Spec{}, fmt.Errorf("network description: subnet: %w", err)
	}
	if n.IPv6Prefix.IsValid() && (!n.IPv6Prefix.Addr().Is6() || n.IPv6Prefix.Addr().Is4In6() || n.IPv6Prefix != n.IPv6Prefix.Masked() || n.IPv6Prefix.Bits() > 64) {
		return Spec{}, fmt.Errorf("network description: ipv6Prefix %s: want an IPv6 prefix of /64 or shorter", n.IPv6Prefix)
	}
	if n.MTU != 0 && (n.MTU < 1280 || n.MTU > 16384) {
		return Spec{}, fmt.Errorf("network description: mtu %d: want 1280 to 16384, or none", n.MTU)
	}
	return Spec{Subnet: n.Subnet, IPv6: n.IPv6Prefix, MTU: uint32(n.MTU), Reservations: slices.Clone(n.Reservations),
		DisableNAT44: o.DisableNAT44, DisableNAT66: o.DisableNAT66}, nil
}

// Equal reports whether s and o make the same network.
func (s Spec) Equal(o Spec) bool {
	return s.Subnet == o.Subnet && s.IPv6 == o.IPv6 && s.MTU == o.MTU &&
		s.DisableNAT44 == o.DisableNAT44 && s.DisableNAT66 == o.DisableNAT66 &&
		slices.Equal(s.Reservations, o.Reservations)
}

// Gateway is the host's address on the network: the subnet's first host,
// which vmnet reserves for the host ("the second address of the range").
func (s Spec) Gateway() netip.Addr { return s.Subnet.Addr().Next() }

// Held is a network vmlane-vmnet made and holds.
type Held struct {
	Network       Network
	Serialization XPCObject
	// Subnet and IPv6 are what vmnet reports it took
	// (vmnet_network_get_ipv4_subnet, _get_ipv6_prefix).
	Subnet, IPv6 netip.Prefix
	// Problems are the reservations vmnet refused (each is logged; the
	// network is made without them).
	Problems []string
}

// Release gives the network back: its serialization, then the network.
// vmnet tears it down once no process holds it (a runtime that rebuilt it
// from the serialization holds its own reference).
func (h *Held) Release(api API) {
	if h.Serialization != 0 {
		api.XPCRelease(h.Serialization)
	}
	if h.Network != 0 {
		api.Release(uintptr(h.Network))
	}
}

// ErrCreate marks a failure of vmnet_network_create: the configuration
// was taken, vmnet would not make the network. The usual cause is a subnet
// in use elsewhere (vmnet refuses overlapping networks).
var ErrCreate = errors.New("vmnet did not create the network")

// MismatchError is the read-back check's finding: vmnet made the network,
// but not on the subnet asked for. The network is released: serving it
// would put VMs on addresses other nodes do not route here.
type MismatchError struct {
	Family    string
	Want, Got netip.Prefix
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("vmnet made the network on %s %s, not on %s as asked: the network is not served", e.Family, e.Got, e.Want)
}

// Create makes the network of s through api, in the order vmnet requires
// (every setting before vmnet_network_create; reservations cannot be added
// to a network that exists), checks the subnet vmnet reports against s
// (the read-back check), and copies the serialization that clients get.
// On any failure it releases what it made.
//
// The IPv4 subnet is passed as its first host. vmnet's reference calls the
// argument "the subnet address"; apple/container and Code-Hex/vz pass the
// first host, and the vmnet crate's documentation reports that vmnet's
// overlap check works only then. If vmnet refuses the first host with
// VMNET_INVALID_ARGUMENT, Create tries the network address once. The
// read-back decides whether the result is the podCIDR either way.
func Create(api API, s Spec) (_ *Held, err error) {
	cfg, st := api.ConfigurationCreate(SharedMode)
	if st != Success || cfg == 0 {
		return nil, fmt.Errorf("vmnet_network_configuration_create(%s): %w", SharedMode, st)
	}
	defer api.Release(uintptr(cfg))
	mask := maskOf(s.Subnet)
	if st := api.ConfigurationSetIPv4Subnet(cfg, s.Gateway(), mask); st == InvalidArgument {
		if st := api.ConfigurationSetIPv4Subnet(cfg, s.Subnet.Addr(), mask); st != Success {
			return nil, fmt.Errorf("vmnet_network_configuration_set_ipv4_subnet(%s or %s, %s): %w", s.Gateway(), s.Subnet.Addr(), mask, st)
		}
	} else if st != Success {
		return nil, fmt.Errorf("vmnet_network_configuration_set_ipv4_subnet(%s, %s): %w", s.Gateway(), mask, st)
	}
	if s.IPv6.IsValid() {
		if st := api.ConfigurationSetIPv6Prefix(cfg, s.IPv6.Addr(), uint8(s.IPv6.Bits())); st != Success {
			return nil, fmt.Errorf("vmnet_network_configuration_set_ipv6_prefix(%s): %w", s.IPv6, st)
		}
	}
	if s.MTU != 0 {
		if st := api.ConfigurationSetMTU(cfg, s.MTU); st != Success {
			return nil, fmt.Errorf("vmnet_network_configuration_set_mtu(%d): %w", s.MTU, st)
		}
	}
	if s.DisableNAT44 {
		api.ConfigurationDisableNAT44(cfg)
	}
	if s.DisableNAT66 {
		api.ConfigurationDisableNAT66(cfg)
	}
	var problems []string
	for _, r := range s.Reservations {
		hw, err := net.ParseMAC(r.MAC)
		if err != nil || len(hw) != 6 || !r.IP.Is4() {
			problems = append(problems, fmt.Sprintf("reservation %s for %q: not a 48-bit MAC and an IPv4 address", r.IP, r.MAC))
			continue
		}
		if st := api.ConfigurationAddDHCPReservation(cfg, [6]byte(hw), r.IP); st != Success {
			problems = append(problems, fmt.Sprintf("reservation %s for %s: vmnet_network_configuration_add_dhcp_reservation: %s", r.IP, r.MAC, st))
		}
	}
	n, st := api.NetworkCreate(cfg)
	if st != Success || n == 0 {
		return nil, fmt.Errorf("%w: vmnet_network_create: %w", ErrCreate, st)
	}
	h := &Held{Network: n, Problems: problems}
	defer func() {
		if err != nil {
			h.Release(api)
		}
	}()
	addr, gotMask := api.NetworkGetIPv4Subnet(n)
	h.Subnet = prefixOf(addr, gotMask)
	if h.Subnet != s.Subnet {
		return nil, &MismatchError{Family: "IPv4", Want: s.Subnet, Got: h.Subnet}
	}
	if s.IPv6.IsValid() {
		p, bits := api.NetworkGetIPv6Prefix(n)
		if p.Is6() && int(bits) <= 128 {
			h.IPv6 = netip.PrefixFrom(p, int(bits)).Masked()
		}
		if h.IPv6 != s.IPv6 {
			return nil, &MismatchError{Family: "IPv6", Want: s.IPv6, Got: h.IPv6}
		}
	}
	ser, st := api.NetworkCopySerialization(n)
	if st != Success || ser == 0 {
		return nil, fmt.Errorf("vmnet_network_copy_serialization: %w", st)
	}
	h.Serialization = ser
	return h, nil
}

// maskOf is p's netmask as an address (255.255.255.0 for a /24).
func maskOf(p netip.Prefix) netip.Addr {
	m := net.CIDRMask(p.Bits(), 32)
	return netip.AddrFrom4([4]byte(m))
}

// prefixOf is the prefix an address and a dotted mask name, masked; the
// zero Prefix when the mask is not contiguous or not IPv4.
func prefixOf(addr, mask netip.Addr) netip.Prefix {
	if !addr.Is4() || !mask.Is4() {
		return netip.Prefix{}
	}
	m := mask.As4()
	ones, bits := net.IPMask(m[:]).Size()
	if bits != 32 {
		return netip.Prefix{}
	}
	return netip.PrefixFrom(addr, ones).Masked()
}

// Overlapping names the interfaces with an IPv4 address in subnet (a VPN,
// another vmnet network, a leftover bridge): what keeps vmnet from making
// a network there, for the report of a failed create.
func Overlapping(ifaces []pf.Iface, subnet netip.Prefix) []string {
	var out []string
	for _, ifc := range ifaces {
		for _, a := range ifc.Addrs {
			if a.Addr().Is4() && a.Overlaps(subnet) {
				out = append(out, fmt.Sprintf("%s %s", ifc.Name, a))
			}
		}
	}
	return out
}

// BridgeOf is the interface holding gateway: the network's bridge, found
// by its address (vmnet names bridges itself, and a host-only network has
// one too). "" until a VM has started on the network.
func BridgeOf(ifaces []pf.Iface, gateway netip.Addr) string {
	for _, ifc := range ifaces {
		for _, a := range ifc.Addrs {
			if a.Addr() == gateway {
				return ifc.Name
			}
		}
	}
	return ""
}

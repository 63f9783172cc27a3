package pf

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"

	"github.com/vmlane/vmlane/internal/macaddr"
	"github.com/vmlane/vmlane/internal/netaddr"
)

// DefaultNetworkFile is where vmlaned writes the network description on
// macOS 26 and later.
const DefaultNetworkFile = "/var/db/vmlane/vmnet-network.json"

// Network describes the node's vmnet network for macOS 26 and later, where
// vmnet ignores its plist's Shared_Net_* keys: vmlaned writes it from the
// Node's podCIDR, and vmlane-vmnet (package pf/vmnet) makes the network
// from it with the vmnet_network API, field by field:
//
//	cfg := vmnet_network_configuration_create(VMNET_SHARED_MODE, &status)
//	vmnet_network_configuration_set_ipv4_subnet(cfg, &gateway, &mask)    // "gateway" (the first host), "mask"
//	vmnet_network_configuration_set_ipv6_prefix(cfg, &prefix, len)        // "ipv6Prefix", when there
//	vmnet_network_configuration_set_mtu(cfg, mtu)                         // "mtu", when not 0
//	vmnet_network_configuration_add_dhcp_reservation(cfg, &mac, &ip)      // each of "reservations"
//	net := vmnet_network_create(cfg, &status)
//
// vmnet gives the host the subnet's second address, which is "gateway",
// and reserves the first and the last. Reservations cannot change while
// the network is active: vmlane-vmnet makes the network anew with a
// changed file once no client holds it.
type Network struct {
	// Version is the format's version, 1.
	Version int `json:"version"`
	// Mode is vmnet's operating mode, always "shared" (VMNET_SHARED_MODE:
	// NAT to the outside, which the pf anchor exempts pod traffic from).
	Mode    string       `json:"mode"`
	Subnet  netip.Prefix `json:"subnet"`
	Gateway netip.Addr   `json:"gateway"`
	// Mask is Subnet's mask in dotted form, as set_ipv4_subnet takes it.
	Mask string `json:"mask"`
	// IPv6Prefix is the node's IPv6 pod prefix on a dual-stack node
	// (vmnet_network_configuration_set_ipv6_prefix).
	IPv6Prefix netip.Prefix `json:"ipv6Prefix,omitzero"`
	MTU        int          `json:"mtu,omitempty"`
	// DNS is what the VMs should use (vmnet's DHCP server announces its
	// own DNS proxy at the gateway; runtimes that configure guests
	// themselves use these).
	DNS          *DNS          `json:"dns,omitempty"`
	Reservations []Reservation `json:"reservations"`
}

// DNS is the resolver configuration for the VMs.
type DNS struct {
	Nameservers []string `json:"nameservers,omitempty"`
	Search      []string `json:"search,omitempty"`
	Domain      string   `json:"domain,omitempty"`
}

// Reservation pins a VM's address to its MAC.
type Reservation struct {
	MAC string     `json:"mac"`
	IP  netip.Addr `json:"ip"`
}

// NewNetwork builds the description of subnet. Reservations are checked
// and sorted by address: ones outside the subnet, on an address vmnet
// reserves (network, gateway, broadcast), with a malformed MAC, or
// repeating an address or a MAC already taken are left out and returned as
// problems, so that one bad lease entry does not cost the others theirs.
func NewNetwork(subnet netip.Prefix, mtu int, dns *DNS, res []Reservation) (Network, []string, error) {
	sn, err := SharedNetFor(subnet)
	if err != nil {
		return Network{}, nil, err
	}
	n := Network{Version: 1, Mode: "shared", Subnet: subnet, Gateway: subnet.Addr().Next(), Mask: sn.Mask, MTU: mtu, Reservations: []Reservation{}}
	if dns != nil && (len(dns.Nameservers)+len(dns.Search) > 0 || dns.Domain != "") {
		n.DNS = dns
	}
	res = slices.Clone(res)
	slices.SortStableFunc(res, func(a, b Reservation) int { return a.IP.Compare(b.IP) })
	broadcast := netaddr.LastAddr(subnet)
	seenIP := map[netip.Addr]bool{}
	seenMAC := map[string]bool{}
	var problems []string
	for _, r := range res {
		mac, err := macaddr.Normalize(r.MAC)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("reservation %s for %q: not a 48-bit MAC", r.IP, r.MAC))
			continue
		case !subnet.Contains(r.IP):
			problems = append(problems, fmt.Sprintf("reservation %s for %s: outside %s", r.IP, r.MAC, subnet))
			continue
		case r.IP == subnet.Addr() || r.IP == n.Gateway || r.IP == broadcast:
			problems = append(problems, fmt.Sprintf("reservation %s for %s: vmnet reserves that address", r.IP, r.MAC))
			continue
		}
		if seenIP[r.IP] || seenMAC[mac] {
			problems = append(problems, fmt.Sprintf("reservation %s for %s: address or MAC already reserved", r.IP, mac))
			continue
		}
		seenIP[r.IP], seenMAC[mac] = true, true
		n.Reservations = append(n.Reservations, Reservation{MAC: mac, IP: r.IP})
	}
	return n, problems, nil
}

// Marshal is the file's content: indented JSON, newline-terminated.
// Pure: golden tested.
func (n Network) Marshal() ([]byte, error) {
	out, err := json.MarshalIndent(n, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// Package antispoof keeps each vmlane attachment to its own identity on the
// node bridge: frames from a port must carry the port's MAC as source, IPv4
// packets its address (or 0.0.0.0 for DHCP), ARP its MAC and address as
// sender, IPv6 packets its IPv6 address when it has one, a link-local
// address or :: (DAD, DHCPv6 and neighbour discovery use those), but never
// the node's own link-local address (the pods' router). Neighbour
// advertisements must name the port's own IPv6 address (or a link-local
// one, not the router's) as target, and the link-layer address options of
// NS, NA and RS the frame's own MAC. DHCP and DHCPv6 server replies, IPv6
// router advertisements and redirects, and DHCP client messages whose
// chaddr is not the frame's source are dropped, and so is every ethertype
// but IPv4, ARP and IPv6 (802.1Q tags included), save one RARP request: the
// one QEMU sends to announce a migrated guest's NIC, which names the port's
// MAC as sender and target and no address.
//
// The rules live in two nftables tables of vmlane's own, programmed over
// netlink (no nft binary is needed on the node). The bridge family's
// table (table bridge vmlane) checks every frame on the bridge's
// prerouting hook. Its rules are fixed; what varies is its sets, keyed by
// the host end's interface name:
//
//	ports    ifname                             ports that are checked
//	macs     ifname . ether_addr                a port's MAC
//	addrs    ifname . ether_addr . ipv4_addr    a port's MAC and address
//	addrs6   ifname . ether_addr . ipv6_addr    a port's MAC and IPv6 address
//	routers6 ipv6_addr                          the node's link-local addresses
//
// The bridge handles frames to the 802.1D link-local group addresses
// (01:80:c2:00:00:0X) outside that hook, and learns their source MACs, so
// the netdev family's table of the same name holds a base chain per
// checked port on its link's ingress hook, which runs before the bridge
// sees a frame: the source MAC must be the port's (its own copy of macs)
// and nothing goes to those groups. A chain is bound to a link that must
// exist (before Linux 6.16), so the CNI plugin attaches it between
// creating the veth and joining it to the bridge (Table.Attach), and Sync
// attaches the missing ones of links that exist.
//
// Each vmlane network (each bridge) has tables of its own: vmlane for the
// default bridge, vmlane-BRIDGE for another (plugin.AntiSpoofTable), so
// that the vmlaned of one network, which makes its table hold exactly the
// ports of its lease file, never removes another network's. A port is in
// one table only, and every other table lets it pass; a frame passes when
// every base chain of the hook accepts it, so the tables compose.
//
// A port without an IPv6 address (an IPv4-only network) may send IPv6 only
// from link-local addresses and ::.
//
// A port that is in no set is not checked, so an attachment with
// anti-spoofing off, or anything else on the bridge, passes as before.
// Adding or removing a port's identity is one netlink transaction that
// touches only its set elements, and the elements can be added before the
// port exists; attaching its ingress chain is one more, which only adds.
//
// Ensure writes the tables whole in one transaction (add tables, sets and
// chains; flush the chains; add the rules), which is idempotent, atomic
// and safe to run from several processes at once: the kernel serializes
// nftables transactions, and the set elements survive it.
//
// Cost: a transaction that only adds takes about 1 ms; one that deletes
// anything (a set element, a rule) waits for an RCU grace period, about
// 13 ms, holding the nftables commit lock meanwhile: the kernel frees what
// was deleted from a work item after a grace period, and closing any
// nftables netlink socket flushes that work under the lock
// (nft_rcv_nl_event), so the deleter pays at its socket's close. So Add writes
// the table only when it is missing, and callers batch their removals
// (Remove takes many ports, Sync does everything in one transaction).
package antispoof

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
)

// TableName is the name of vmlane's table in the bridge family, for the
// default bridge; the table of another is TableName-BRIDGE.
const TableName = "vmlane"

// Port is what one bridge port may send as: the host end of a veth, and the
// MAC, IPv4 address and (dual stack) IPv6 address of the pod or VM behind
// it.
type Port struct {
	// Name is the interface name of the port (the host end of the veth).
	Name string
	MAC  net.HardwareAddr
	IP   netip.Addr
	// IP6 is zero on an IPv4-only network.
	IP6 netip.Addr
}

func (p Port) String() string {
	if p.IP6.IsValid() {
		return fmt.Sprintf("%s %s %s %s", p.Name, p.MAC, p.IP, p.IP6)
	}
	return fmt.Sprintf("%s %s %s", p.Name, p.MAC, p.IP)
}

// View is what a table held when it was read.
type View struct {
	// Ports are the ports it checked, by name.
	Ports []Port
	// Exists is false for no table, or one Add would write whole.
	Exists bool
	// Routers6 is what the routers6 set held.
	Routers6 []netip.Addr
	// ndMACs are the keys of the netdev table's macs set (nil when it
	// has none).
	ndMACs [][]byte
}

// ifNameSize is IFNAMSIZ: the kernel's interface names, NUL included.
const ifNameSize = 16

// Validate reports what is wrong with p, naming the field.
func (p Port) Validate() error {
	switch {
	case p.Name == "" || len(p.Name) >= ifNameSize || strings.ContainsAny(p.Name, "/ \x00"):
		return fmt.Errorf("antispoof: port name %q is not an interface name", p.Name)
	case len(p.MAC) != 6:
		return fmt.Errorf("antispoof: port %s: MAC %q is not a 48-bit MAC", p.Name, p.MAC)
	case p.MAC[0]&1 != 0:
		return fmt.Errorf("antispoof: port %s: MAC %s is a multicast address", p.Name, p.MAC)
	case !p.IP.Is4() || p.IP.IsUnspecified():
		return fmt.Errorf("antispoof: port %s: address %v is not a unicast IPv4 address", p.Name, p.IP)
	case p.IP6.IsValid() && (!p.IP6.Is6() || p.IP6.Is4In6() || !p.IP6.IsGlobalUnicast() || p.IP6.IsLinkLocalUnicast()):
		return fmt.Errorf("antispoof: port %s: IPv6 address %v is not a global unicast IPv6 address", p.Name, p.IP6)
	}
	return nil
}

// Key encodings of the three sets: every field of a concatenation is
// padded to a multiple of four bytes (the nftables register size).

func ifnameKey(name string) []byte {
	k := make([]byte, ifNameSize)
	copy(k, name)
	return k
}

func macKey(name string, mac net.HardwareAddr) []byte {
	return append(append(ifnameKey(name), mac[:6]...), 0, 0)
}

func addrKey(name string, mac net.HardwareAddr, ip netip.Addr) []byte {
	a := ip.As4()
	return append(macKey(name, mac), a[:]...)
}

func addr6Key(name string, mac net.HardwareAddr, ip netip.Addr) []byte {
	a := ip.As16()
	return append(macKey(name, mac), a[:]...)
}

// withAddrs6 gives each port its IPv6 address from the addrs6 set's keys.
// A key of the wrong length is an error; one whose port (name and MAC) is
// not in ports is left out, as addrs holds every port a writer added.
func withAddrs6(ports []Port, keys [][]byte) error {
	for _, k := range keys {
		if len(k) != ifNameSize+8+16 {
			return fmt.Errorf("antispoof: set addrs6 has a %d-byte key, want %d", len(k), ifNameSize+8+16)
		}
		name, _, _ := strings.Cut(string(k[:ifNameSize]), "\x00")
		mac := net.HardwareAddr(k[ifNameSize : ifNameSize+6])
		for i := range ports {
			if ports[i].Name == name && slices.Equal(ports[i].MAC, mac) {
				ports[i].IP6 = netip.AddrFrom16([16]byte(k[ifNameSize+8:]))
			}
		}
	}
	return nil
}

// portsFromAddrs turns the addrs set's keys back into Ports. A key of the
// wrong length (a set this package did not write) is an error.
func portsFromAddrs(keys [][]byte) ([]Port, error) {
	ports := make([]Port, 0, len(keys))
	for _, k := range keys {
		if len(k) != ifNameSize+8+4 {
			return nil, fmt.Errorf("antispoof: set addrs has a %d-byte key, want %d", len(k), ifNameSize+8+4)
		}
		name, _, _ := strings.Cut(string(k[:ifNameSize]), "\x00")
		ip := netip.AddrFrom4([4]byte(k[ifNameSize+8:]))
		ports = append(ports, Port{Name: name, MAC: slices.Clone(k[ifNameSize : ifNameSize+6]), IP: ip})
	}
	slices.SortFunc(ports, func(a, b Port) int { return strings.Compare(a.Name, b.Name) })
	return ports, nil
}

// ErrNoKernelSupport means the kernel has no nftables bridge family (no
// nf_tables or nft_*_bridge support); docs/security.md says
// what the node needs.
var ErrNoKernelSupport = errors.New("antispoof: the kernel has no nftables bridge family support")

// Changes is what a Sync did.
type Changes struct {
	// Repaired says what was wrong with the table when Sync rewrote it;
	// empty when it was intact.
	Repaired       string
	Added, Removed []Port
	// Attached names the ports whose ingress chain Sync put on their
	// link (one attached by a vmlane from before the chains, or whose
	// chain someone deleted), Detached those whose chain it removed.
	Attached, Detached []string
}

// diff returns the ports of want that have does not hold exactly, and the
// ports of have that want does not: a port whose MAC or address changed is
// in both.
func diff(have, want []Port) (add, remove []Port) {
	key := func(p Port) string { return p.String() }
	in := func(ps []Port) map[string]bool {
		m := make(map[string]bool, len(ps))
		for _, p := range ps {
			m[key(p)] = true
		}
		return m
	}
	h, w := in(have), in(want)
	for _, p := range want {
		if !h[key(p)] {
			add = append(add, p)
			h[key(p)] = true
		}
	}
	for _, p := range have {
		if !w[key(p)] {
			remove = append(remove, p)
		}
	}
	return add, remove
}

// newer returns the ports of have that listed does not hold exactly.
func newer(have, listed []Port) []Port {
	_, out := diff(have, listed)
	return out
}

// LinkLocalEUI64 is the IPv6 link-local address the kernel gives a link
// with MAC mac by default (RFC 4291 appendix A; addr_gen_mode eui64):
// the one the node's bridge gets from its fixed MAC, before the bridge
// exists.
func LinkLocalEUI64(mac net.HardwareAddr) netip.Addr {
	if len(mac) != 6 {
		return netip.Addr{}
	}
	a := [16]byte{0: 0xfe, 1: 0x80, 8: mac[0] ^ 0x02, 9: mac[1], 10: mac[2], 11: 0xff, 12: 0xfe, 13: mac[3], 14: mac[4], 15: mac[5]}
	return netip.AddrFrom16(a)
}

func sameAddrs(a, b []netip.Addr) bool {
	m := map[netip.Addr]bool{}
	for _, x := range a {
		m[x] = true
	}
	n := map[netip.Addr]bool{}
	for _, x := range b {
		if x.Is6() && !x.Is4In6() {
			n[x] = true
		}
	}
	if len(m) != len(n) {
		return false
	}
	for x := range n {
		if !m[x] {
			return false
		}
	}
	return true
}

// without returns the ports not called name.
func without(ports []Port, name string) []Port {
	var out []Port
	for _, p := range ports {
		if p.Name != name {
			out = append(out, p)
		}
	}
	return out
}

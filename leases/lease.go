package leases

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/vmlane/vmlane/internal/macaddr"
)

// Version is the lease file format version this package writes when no
// lease has moved in from another node's subnet; MaxVersion is the newest
// it reads and writes. Version 2 is version 1 plus leases whose addresses
// lie outside the file's subnets ("home", "home6": a VM's addresses that
// moved with it from another node), which a version 1 reader would take
// for a damaged file: a file holds version 2 exactly when it has one.
const (
	Version    = 1
	MaxVersion = 2
)

// DefaultPath is where vmlane keeps a node's lease file.
const DefaultPath = "/var/lib/vmlane/leases.json"

// State is where a lease is in its life.
type State string

const (
	// StateReserved: the address is held for an attachment (by CNI ADD) or
	// offered to a MAC, but no DHCP client has confirmed it yet.
	StateReserved State = "reserved"
	// StateBound: a DHCP client has been ACKed this address until Expires.
	StateBound State = "bound"
	// StateDeclined: a client reported the address in use by someone else
	// (DHCPDECLINE). It is quarantined until Expires.
	StateDeclined State = "declined"
	// StateHeld: the address, IPv6 address and MAC belong to a VM
	// (VMName) that has no attachment on the node now: its pod went, and
	// its next pod gets them back. It lasts until Expires (the network's
	// vmHoldTime after the last pod went); no DHCP server answers for it.
	StateHeld State = "held"
)

// Known reports whether this version knows s. A state it does not know is
// a newer writer's: see the package doc for what readers do with its lease.
func (s State) Known() bool {
	switch s {
	case StateReserved, StateBound, StateDeclined, StateHeld:
		return true
	default:
		return false
	}
}

// Source says who created a lease.
type Source string

const (
	// SourceCNI: reserved by the CNI plugin for a pod attachment.
	SourceCNI Source = "cni"
	// SourceDHCP: allocated by the DHCP server from its dynamic range, for a
	// VM attached to the bridge without CNI.
	SourceDHCP Source = "dhcp"
)

// Known reports whether this version knows s (see [State.Known]).
func (s Source) Known() bool {
	switch s {
	case SourceCNI, SourceDHCP:
		return true
	default:
		return false
	}
}

// Pod names the Kubernetes pod a lease belongs to.
type Pod struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	UID       string `json:"uid,omitempty"`
	// Unknown holds a newer writer's members of "pod".
	Unknown UnknownMembers `json:"-"`
}

// Key identifies a CNI attachment: a container ID and the interface name the
// runtime asked for. The CNI spec uses the same pair as an attachment's
// identity (cni.dev/valid-attachments).
type Key struct {
	ContainerID string
	IfName      string
}

func (k Key) String() string { return k.ContainerID + "/" + k.IfName }

// Lease is one address held on the node.
type Lease struct {
	MAC string     `json:"mac"`
	IP  netip.Addr `json:"ip"`
	// IP6 is the lease's IPv6 address, from the file's Subnet6, on a
	// dual-stack node; zero otherwise. Only CNI reservations have one.
	IP6         netip.Addr `json:"ip6,omitzero"`
	State       State      `json:"state"`
	Source      Source     `json:"source"`
	ContainerID string     `json:"containerID,omitempty"`
	IfName      string     `json:"ifname,omitempty"`
	NetNS       string     `json:"netns,omitempty"`
	// BridgePort is the host end of the attachment's veth when
	// anti-spoofing checks it: the node's daemon keeps that port's
	// nftables entry in step with this lease. Empty when the network has
	// "antiSpoof": false (or for a lease written before vmlane had it).
	BridgePort string `json:"bridgePort,omitempty"`
	// VM is set for a VM pod's attachment (a "vm": true network), whose
	// guest gets the address by DHCP; a plain pod's address is configured
	// by the plugin and its lease is never bound.
	VM bool `json:"vm,omitempty"`
	// VMName ("NAMESPACE/NAME", from the pod annotation vmlane.io/vm)
	// names the VM the lease's addresses and MAC belong to: when the
	// attachment goes, the lease is held for the VM (StateHeld) and the
	// VM's next pod gets the same three. Empty for a lease that belongs
	// to its attachment only.
	VMName string `json:"vmName,omitempty"`
	// Home and Home6 are the pod subnets of another node that IP and IP6
	// belong to: the VM's addresses came with it from that node (its
	// VMClaim), so they lie outside the file's subnet and subnet6. Zero
	// for every address of this node's own subnets.
	Home     netip.Prefix `json:"home,omitzero"`
	Home6    netip.Prefix `json:"home6,omitzero"`
	Pod      Pod          `json:"pod,omitzero"`
	Hostname string       `json:"hostname,omitempty"`
	// Created is zero only for leases read from bootpd's file.
	Created time.Time `json:"created,omitzero"`
	// Expires is zero for a CNI reservation that no DHCP client has bound:
	// such a reservation lasts until it is released.
	Expires time.Time `json:"expires,omitzero"`
	// State6 is what DHCPv6 made of IP6: empty (reserved: no DHCPv6
	// client has it), StateBound until Expires6, or StateDeclined
	// (quarantined) until Expires6. IPv4's State and Expires are
	// independent of it: a guest may run one client and not the other.
	State6   State     `json:"state6,omitempty"`
	Expires6 time.Time `json:"expires6,omitzero"`
	// MACFromClientID marks a bootpd lease whose MAC came out of the
	// client's identifier (a DUID-LL or DUID-LLT) rather than its
	// hardware address: a guest can put any MAC in its identifier, so
	// ByMAC prefers a record keyed by the hardware address. It is never
	// set in vmlane's own file.
	MACFromClientID bool `json:"-"`
	// Unknown holds a newer writer's members of the lease, which a
	// rewrite keeps.
	Unknown UnknownMembers `json:"-"`
}

// Key returns the CNI attachment the lease belongs to; it is zero for leases
// the DHCP server allocated on its own.
func (l Lease) Key() Key { return Key{ContainerID: l.ContainerID, IfName: l.IfName} }

// Known reports whether this version knows the lease's state and source,
// and so what the lease means. A lease it does not know (a newer writer's)
// still holds its address and its MAC against every allocation and is
// written back as it is, but no lookup serves it and no change touches it:
// see the package doc.
func (l Lease) Known() bool { return l.State.Known() && l.Source.Known() }

// Live reports whether l answers for its MAC: a lease this version knows,
// neither declined (quarantined) nor held for a VM that has no attachment.
// The others keep their address and MAC from every other lease all the
// same.
func (l Lease) Live() bool {
	return l.Known() && l.State != StateDeclined && l.State != StateHeld
}

// Expired reports whether the lease has an expiry and it has passed.
func (l Lease) Expired(now time.Time) bool {
	return !l.Expires.IsZero() && !now.Before(l.Expires)
}

// File is the whole lease file.
type File struct {
	Version int          `json:"version"`
	Node    string       `json:"node,omitempty"`
	Subnet  netip.Prefix `json:"subnet"`
	Gateway netip.Addr   `json:"gateway"`
	// LastReserved is the allocator's round-robin cursor.
	LastReserved netip.Addr `json:"lastReserved,omitzero"`
	// Subnet6 and Gateway6 are the node's IPv6 pod subnet and the
	// bridge's address in it, on a dual-stack node; LastReserved6 is
	// their cursor. Zero on an IPv4-only node.
	Subnet6       netip.Prefix `json:"subnet6,omitzero"`
	Gateway6      netip.Addr   `json:"gateway6,omitzero"`
	LastReserved6 netip.Addr   `json:"lastReserved6,omitzero"`
	Leases        []Lease      `json:"leases"`
	// Unknown holds a newer writer's top-level members.
	Unknown UnknownMembers `json:"-"`
}

// NormalizeMAC returns mac in the file's canonical form: lowercase,
// colon-separated, six two-digit octets. It accepts anything net.ParseMAC
// accepts for a 48-bit address, and the macOS spelling with leading zeros
// stripped from octets ("2:0:a:f4:3:7").
func NormalizeMAC(mac string) (string, error) { return macaddr.Normalize(mac) }

// Decode parses and validates a lease file. Members this version does not
// know do not break it: they are kept (see [UnknownMembers]) and Encode
// writes them back. An unknown version is an error.
func Decode(data []byte) (*File, error) {
	return decodeOwned(data)
}

// decodeOwned is Decode for a buffer nobody writes to afterwards.
func decodeOwned(data []byte) (*File, error) {
	// The copy into a string (which the leases' strings then slice) is
	// what keeps the package free of unsafe; Read avoids it by reading
	// the file into a string to begin with.
	return decodeString(string(data))
}

// decodeString is Decode for data already in a string.
func decodeString(data string) (*File, error) {
	f, err := decodeFile(data)
	if err != nil {
		return nil, err
	}
	if err := f.validate(); err != nil {
		return nil, err
	}
	return f, nil
}

// validate checks what a writer must never have produced: a reader that
// accepted these would hand a VM a wrong or duplicate address.
func (f *File) validate() error {
	if !f.Subnet.IsValid() {
		return errors.New("lease file has no valid \"subnet\"")
	}
	if f.Subnet != f.Subnet.Masked() {
		return fmt.Errorf("lease file subnet %s has host bits set", f.Subnet)
	}
	if f.Gateway.IsValid() && !f.Subnet.Contains(f.Gateway) {
		return fmt.Errorf("lease file gateway %s is outside subnet %s", f.Gateway, f.Subnet)
	}
	if err := f.validate6(); err != nil {
		return err
	}
	// The format keeps leases sorted by IP; sort a hand-edited file rather
	// than reject it, then duplicates are neighbours.
	if !slices.IsSortedFunc(f.Leases, func(a, b Lease) int { return a.IP.Compare(b.IP) }) {
		f.sort()
	}
	if err := f.validateOwners(); err != nil {
		return err
	}
	for i, l := range f.Leases {
		if !l.IP.IsValid() {
			return fmt.Errorf("lease %d has no valid \"ip\"", i)
		}
		if err := checkHome(l.IP, l.Home, f.Subnet, "ip", "home", "subnet"); err != nil {
			return fmt.Errorf("lease %d: %w", i, err)
		}
		if i > 0 && f.Leases[i-1].IP == l.IP {
			return fmt.Errorf("lease %d: ip %s is held twice", i, l.IP)
		}
		if l.MAC != "" && !macaddr.Canonical(l.MAC) {
			return fmt.Errorf("lease %d: mac %q is not lowercase colon-separated", i, l.MAC)
		}
		// A state or source this version does not know is a newer
		// writer's, kept and skipped (Lease.Known); only a missing one
		// is no lease at all.
		if l.State == "" {
			return fmt.Errorf("lease %d has no \"state\"", i)
		}
		if l.Source == "" {
			return fmt.Errorf("lease %d has no \"source\"", i)
		}
		if l.State == StateHeld && (l.VMName == "" || l.ContainerID != "") {
			return fmt.Errorf("lease %d: a held lease needs a \"vmName\" and no \"containerID\"", i)
		}
	}
	return nil
}

// validateOwners checks that no attachment holds two leases and no MAC two
// that hold it (holdsMAC): a DEL would free one, and the other stay held
// with nobody to release it. Leases this version does not know follow
// their writer's rules, which it cannot check.
//
// Every Read runs it, so it is built for speed: maps sized for the file
// at once, and a canonical MAC as the 48-bit number it spells,
// which hashes as one word rather than as a 17-byte string.
func (f *File) validateOwners() error {
	var keys map[Key]int
	var macs map[uint64]int
	for i := range f.Leases {
		l := &f.Leases[i]
		if !l.Known() {
			continue // a newer writer's, by its rules
		}
		if l.Source == SourceCNI && l.ContainerID != "" {
			if keys == nil {
				keys = make(map[Key]int, len(f.Leases))
			}
			k := Key{ContainerID: l.ContainerID, IfName: l.IfName}
			if j, ok := keys[k]; ok {
				return fmt.Errorf("lease %d: attachment %s holds two leases (also lease %d)", i, k, j)
			}
			keys[k] = i
		}
		// A MAC spelt otherwise is refused by validate's next check.
		if l.MAC != "" && holdsMAC(*l) && macaddr.Canonical(l.MAC) {
			if macs == nil {
				macs = make(map[uint64]int, len(f.Leases))
			}
			m := macNumber(l.MAC)
			if j, ok := macs[m]; ok {
				return fmt.Errorf("lease %d: mac %s holds two leases (also lease %d)", i, l.MAC, j)
			}
			macs[m] = i
		}
	}
	return nil
}

// macNumber is a canonical MAC ("02:76:0a:f4:03:07") as a number, its
// bytes in order.
func macNumber(mac string) uint64 {
	var n uint64
	for i := 0; i+1 < len(mac); i += 3 {
		n = n<<8 | uint64(hexVal(mac[i]))<<4 | uint64(hexVal(mac[i+1]))
	}
	return n
}

func hexVal(c byte) byte {
	if c >= 'a' {
		return c - 'a' + 10
	}
	return c - '0'
}

// holdsMAC reports whether l holds its MAC, so that no other lease may
// have it: every lease but a declined dynamic one, which only keeps its
// address out of use while its client gets another. A declined CNI
// reservation is the VM's address and turns reserved again; a lease of a
// state this version does not know holds its MAC too (whether its writer
// would let the MAC have a second lease, this version cannot tell).
func holdsMAC(l Lease) bool {
	return l.State != StateDeclined || l.Source == SourceCNI
}

// validate6 checks the IPv6 members: a subnet of its family with host bits
// clear, its gateway inside it, and every lease's ip6 inside it, not the
// gateway, and held once.
func (f *File) validate6() error {
	if f.Subnet6.IsValid() {
		if !f.Subnet6.Addr().Is6() || f.Subnet6.Addr().Is4In6() {
			return fmt.Errorf("lease file subnet6 %s is not an IPv6 prefix", f.Subnet6)
		}
		if f.Subnet6 != f.Subnet6.Masked() {
			return fmt.Errorf("lease file subnet6 %s has host bits set", f.Subnet6)
		}
	}
	if f.Gateway6.IsValid() && !f.Subnet6.Contains(f.Gateway6) {
		return fmt.Errorf("lease file gateway6 %s is outside subnet6 %s", f.Gateway6, f.Subnet6)
	}
	var seen map[netip.Addr]int
	for i, l := range f.Leases {
		if !l.IP6.IsValid() {
			if l.State6 != "" || !l.Expires6.IsZero() {
				return fmt.Errorf("lease %d has a \"state6\" or \"expires6\" but no \"ip6\"", i)
			}
			continue
		}
		if !f.Subnet6.IsValid() && !l.Home6.IsValid() {
			return fmt.Errorf("lease %d: ip6 %s but the file has no subnet6", i, l.IP6)
		}
		if err := checkHome(l.IP6, l.Home6, f.Subnet6, "ip6", "home6", "subnet6"); err != nil {
			return fmt.Errorf("lease %d: %w", i, err)
		}
		switch {
		case l.IP6 == f.Gateway6:
			return fmt.Errorf("lease %d: ip6 %s is the gateway", i, l.IP6)
		}
		if seen == nil {
			seen = make(map[netip.Addr]int)
		}
		if j, ok := seen[l.IP6]; ok {
			return fmt.Errorf("lease %d: ip6 %s is held twice (also by lease %d)", i, l.IP6, j)
		}
		seen[l.IP6] = i
	}
	return nil
}

// checkHome checks that ip lies in the file's subnet, or, for a lease that
// moved in (home set), in its home subnet and not in the file's.
func checkHome(ip netip.Addr, home, subnet netip.Prefix, ipName, homeName, subnetName string) error {
	if !home.IsValid() {
		if !subnet.Contains(ip) {
			return fmt.Errorf("%s %s is outside %s %s", ipName, ip, subnetName, subnet)
		}
		return nil
	}
	switch {
	case home != home.Masked():
		return fmt.Errorf("%s %s has host bits set", homeName, home)
	case !home.Contains(ip):
		return fmt.Errorf("%s %s is outside its %s %s", ipName, ip, homeName, home)
	case subnet.IsValid() && home.Overlaps(subnet):
		return fmt.Errorf("%s %s overlaps the file's %s %s: an address of this node's own subnet has no other home", homeName, home, subnetName, subnet)
	}
	return nil
}

// formatVersion is the version f is written as: 2 when a lease moved in
// from another node's subnet, else 1.
func (f *File) formatVersion() int {
	for _, l := range f.Leases {
		if l.Home.IsValid() || l.Home6.IsValid() {
			return MaxVersion
		}
	}
	return Version
}

func (f *File) sort() {
	slices.SortFunc(f.Leases, func(a, b Lease) int { return a.IP.Compare(b.IP) })
}

// normalizeTimes keeps the file in UTC with second precision, as the format
// promises RFC 3339 UTC timestamps.
func normTime(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC().Truncate(time.Second)
}

package leases

import (
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Tx is one locked read-modify-write of the lease file, handed to the
// function given to [Store.Update]. Its methods change the in-memory file;
// Update writes it once fn returns. A Tx must not be used after fn returns.
type Tx struct {
	f        *File
	s        *Store
	now      time.Time
	changed  bool
	readOnly bool
}

// ReserveRequest says what to reserve.
type ReserveRequest struct {
	// Key is the CNI attachment. It is the identity of a CNI lease: a
	// second Reserve with the same Key returns the same lease. Leave it
	// zero for a DHCP dynamic lease, whose identity is its MAC.
	Key Key
	// Source defaults to SourceCNI when Key is set, else SourceDHCP.
	Source Source
	// IP asks for a specific address; zero allocates one.
	IP netip.Addr
	// IP6 asks for a specific IPv6 address of a dual-stack store
	// ([WithSubnet6]); zero allocates one. A CNI reservation of a
	// dual-stack store always gets one.
	IP6 netip.Addr
	// Prefer and Prefer6 are addresses allocation tries first, when
	// allocation could pick them at all (free, in the pool, not excluded,
	// their derived MAC free); otherwise it goes on as without them, and
	// the round-robin cursor does not move. Unlike IP they ask for
	// nothing: the CNI plugin passes the addresses an attachment of the
	// same key had before (a runtime retrying with the same container
	// ID), whose anti-spoofing entry then stays as it is.
	Prefer, Prefer6 netip.Addr
	// MAC is the client's MAC. When empty and MACFor is set, MACFor
	// derives it from the allocated address (VM NICs get a stable MAC
	// derived from their IP). Required for DHCP leases.
	MAC    string
	MACFor func(netip.Addr) string
	// Pool limits allocation to a range of the subnet (the DHCP dynamic
	// range); zero means the whole subnet.
	Pool Pool
	// Exclude is a range that allocation skips (the CNI plugin keeps out
	// of the DHCP dynamic range); zero excludes nothing. A requested IP in
	// it is still honoured.
	Exclude Pool
	NetNS   string
	// BridgePort is the attachment's anti-spoofed bridge port, if any.
	BridgePort string
	// VM marks a VM pod's attachment.
	VM bool
	// VMName ("NAMESPACE/NAME") makes the addresses and MAC the VM's: a
	// lease held for it (StateHeld) is taken over instead of allocating,
	// and an attachment of another pod that holds it refuses the
	// request with ErrVMInUse unless Stale says that attachment is gone.
	VMName string
	// Stale reports whether the attachment of a lease that holds VMName
	// is gone (its netns no longer exists) though its DEL never came.
	Stale func(Lease) bool
	// Home and Home6 move a VM's addresses in from another node's pod
	// subnets (its VMClaim): IP, IP6 and MAC are then required and lie in
	// them, outside the store's subnets. Used only when the VM has no
	// lease here to take over.
	Home, Home6 netip.Prefix
	Pod         Pod
	Hostname    string
	// Expires is zero for a reservation held until released (CNI). A DHCP
	// offer sets it to the offer's lifetime.
	Expires time.Time
}

func (tx *Tx) mustWrite() {
	if tx.readOnly {
		panic("leases: change in a read-only transaction")
	}
	tx.changed = true
}

// Reserve holds an address: the requested one, or the next free one after
// the last allocation. It is idempotent: when the attachment (or, for DHCP
// leases, the MAC) already holds a lease, that lease is returned unchanged.
func (tx *Tx) Reserve(req ReserveRequest) (Lease, error) {
	req, err := req.normalized()
	if err != nil {
		return Lease{}, err
	}
	if i := tx.indexOfOwner(req); i >= 0 {
		l, err := tx.f.Leases[i].reuseFor(req)
		if err != nil || l.IP6.IsValid() || !tx.dualStack(req) {
			return l, err
		}
		// A reservation made before the node was dual-stack (or by a
		// plugin of an older vmlane) gets its IPv6 address now.
		ip6, err := tx.reserve6(req)
		if err != nil {
			return Lease{}, err
		}
		tx.mustWrite()
		tx.f.Leases[i].IP6 = ip6
		return tx.f.Leases[i], nil
	}
	if req.VMName != "" {
		if l, ok, err := tx.takeOverVM(req); ok || err != nil {
			return l, err
		}
	}
	if req.Home.IsValid() {
		return tx.moveIn(req)
	}
	// Every lease holds its address, whatever its state: a declined one
	// until its quarantine ends, one this version does not know until a
	// version that knows it lets it go.
	held := make(map[netip.Addr]*Lease, len(tx.f.Leases))
	for i := range tx.f.Leases {
		held[tx.f.Leases[i].IP] = &tx.f.Leases[i]
	}
	var ip netip.Addr
	if req.IP.IsValid() {
		ip, err = tx.checkRequested(req.IP.Unmap(), held)
	} else {
		ip, err = tx.allocate(req, held)
	}
	if err != nil {
		return Lease{}, err
	}
	mac, err := tx.macFor(req, ip)
	if err != nil {
		return Lease{}, err
	}
	var ip6 netip.Addr
	if tx.dualStack(req) {
		if ip6, err = tx.reserve6(req); err != nil {
			return Lease{}, err
		}
	} else if req.IP6.IsValid() {
		return Lease{}, fmt.Errorf("requested ip6 %s, but the lease store has no IPv6 subnet (no subnet6 in the network config)", req.IP6)
	}
	l := Lease{
		MAC:         mac,
		IP:          ip,
		IP6:         ip6,
		State:       StateReserved,
		Source:      req.Source,
		ContainerID: req.Key.ContainerID,
		IfName:      req.Key.IfName,
		NetNS:       req.NetNS,
		BridgePort:  req.BridgePort,
		VM:          req.VM,
		VMName:      req.VMName,
		Pod:         req.Pod,
		Hostname:    req.Hostname,
		Created:     tx.now,
		Expires:     normTime(req.Expires),
	}
	if !req.IP.IsValid() && ip != req.Prefer.Unmap() {
		tx.f.LastReserved = ip
	}
	tx.mustWrite()
	tx.f.Leases = append(tx.f.Leases, l)
	return l, nil
}

// normalized fills in req's source (CNI when it names an attachment, DHCP
// otherwise), spells its MAC canonically, and checks that the source has
// what it needs.
func (req ReserveRequest) normalized() (ReserveRequest, error) {
	if req.Source == "" {
		req.Source = SourceDHCP
		if req.Key != (Key{}) {
			req.Source = SourceCNI
		}
	}
	if req.MAC != "" {
		m, err := NormalizeMAC(req.MAC)
		if err != nil {
			return req, err
		}
		req.MAC = m
	}
	switch req.Source {
	case SourceCNI:
		if req.Key.ContainerID == "" || req.Key.IfName == "" {
			return req, fmt.Errorf("a CNI reservation needs a container ID and an interface name, got %q", req.Key)
		}
	case SourceDHCP:
		if req.MAC == "" {
			return req, errors.New("a DHCP lease needs a MAC")
		}
	default:
		return req, fmt.Errorf("unknown lease source %q", req.Source)
	}
	return req, nil
}

// reuseFor returns l, the lease req's owner already holds (a retried ADD,
// a client's second DISCOVER), unless req asks for something l is not.
func (l Lease) reuseFor(req ReserveRequest) (Lease, error) {
	if !l.Known() {
		return Lease{}, fmt.Errorf("%w: %s holds %s", ErrConflict, describe(l), l.IP)
	}
	if req.IP.IsValid() && req.IP != l.IP {
		return Lease{}, fmt.Errorf("%w: %s already holds %s, the request asks for %s", ErrConflict, describe(l), l.IP, req.IP)
	}
	if req.IP6.IsValid() && l.IP6.IsValid() && req.IP6 != l.IP6 {
		return Lease{}, fmt.Errorf("%w: %s already holds %s, the request asks for %s", ErrConflict, describe(l), l.IP6, req.IP6)
	}
	if req.MAC != "" && l.MAC != "" && req.MAC != l.MAC {
		return Lease{}, fmt.Errorf("%w: %s already holds %s with MAC %s, the request asks for MAC %s", ErrConflict, describe(l), l.IP, l.MAC, req.MAC)
	}
	return l, nil
}

// checkRequested returns ip, an address a request names, if it can be
// reserved: in the subnet, not the gateway, network or broadcast address,
// not held.
func (tx *Tx) checkRequested(ip netip.Addr, held map[netip.Addr]*Lease) (netip.Addr, error) {
	f := tx.f
	switch {
	case !f.Subnet.Contains(ip):
		return ip, fmt.Errorf("requested ip %s is outside subnet %s", ip, f.Subnet)
	case ip == f.Gateway:
		return ip, fmt.Errorf("requested ip %s is the gateway of %s", ip, f.Subnet)
	case !poolOf(f.Subnet).contains(ip):
		return ip, fmt.Errorf("requested ip %s is the network or broadcast address of %s", ip, f.Subnet)
	case held[ip] != nil:
		return ip, fmt.Errorf("requested ip %s: %w by %s", ip, ErrInUse, describe(*held[ip]))
	}
	return ip, nil
}

// allocate picks the next free address of req's pool (the subnet's when
// none) round robin from the file's cursor, skipping req.Exclude.
func (tx *Tx) allocate(req ReserveRequest, held map[netip.Addr]*Lease) (netip.Addr, error) {
	f := tx.f
	all := poolOf(f.Subnet)
	pool := all
	if req.Pool.First.IsValid() {
		if !all.contains(req.Pool.First) || !all.contains(req.Pool.Last) {
			return netip.Addr{}, fmt.Errorf("pool %s is not inside subnet %s", req.Pool, f.Subnet)
		}
		pool = req.Pool
	}
	// With a derived MAC, an address whose MAC some lease already has
	// (a runtime asked for it explicitly) is as good as held:
	// allocating it would fail on the MAC and block every later ADD.
	// (A lease this version does not know holds its MAC, below.)
	macHeld := map[string]bool{}
	if req.MAC == "" && req.MACFor != nil {
		for _, l := range f.Leases {
			if l.MAC != "" && l.State != StateDeclined {
				macHeld[l.MAC] = true
			}
		}
	}
	isHeld := func(a netip.Addr) bool {
		if held[a] != nil || a == f.Gateway {
			return true
		}
		if len(macHeld) > 0 {
			m, err := NormalizeMAC(req.MACFor(a))
			return err == nil && macHeld[m]
		}
		return false
	}
	if p := req.Prefer.Unmap(); p.IsValid() && pool.contains(p) && !req.Exclude.excludes(p) && !isHeld(p) {
		return p, nil
	}
	ip, ok := allocate(pool, f.LastReserved, req.Exclude, isHeld, len(held)+len(macHeld)+1)
	if !ok {
		return netip.Addr{}, fmt.Errorf("subnet %s is full (pool %s, %d leases held): %w", f.Subnet, pool, len(held), ErrExhausted)
	}
	return ip, nil
}

// macFor is the new lease's MAC: req's, or the one req.MACFor derives from
// ip. It must not be another lease's.
func (tx *Tx) macFor(req ReserveRequest, ip netip.Addr) (string, error) {
	mac := req.MAC
	if mac == "" && req.MACFor != nil {
		m, err := NormalizeMAC(req.MACFor(ip))
		if err != nil {
			return "", fmt.Errorf("deriving MAC for %s: %w", ip, err)
		}
		mac = m
	}
	if mac == "" {
		return "", nil
	}
	// One lease per MAC (holdsMAC).
	for _, l := range tx.f.Leases {
		if l.MAC == mac && holdsMAC(l) {
			return "", fmt.Errorf("MAC %s: %w by %s (ip %s, %s)", mac, ErrInUse, describe(l), l.IP, l.State)
		}
	}
	return mac, nil
}

// indexOfOwner finds the lease the request already owns, or -1. Reserve
// has checked req.Source.
func (tx *Tx) indexOfOwner(req ReserveRequest) int {
	for i, l := range tx.f.Leases {
		switch req.Source {
		case SourceCNI:
			// The attachment's lease in any state: one in a state this
			// version does not know is found too, for Reserve to refuse
			// rather than give the attachment a second lease.
			if l.Source == SourceCNI && l.Key() == req.Key {
				return i
			}
		case SourceDHCP:
			// A MAC's declined dynamic lease is not its own any more;
			// one in a state this version does not know is not its to
			// use, and holds the MAC (Reserve says ErrInUse).
			if l.Source == SourceDHCP && l.MAC == req.MAC && l.State != StateDeclined && l.State.Known() {
				return i
			}
		}
	}
	return -1
}

// describe names a lease's holder for error messages.
func describe(l Lease) string {
	switch {
	case !l.Known():
		return fmt.Sprintf("a lease of state %q and source %q, which this version does not know (a newer vmlane's)", l.State, l.Source)
	case l.State == StateDeclined:
		return "a quarantined (declined) address"
	case l.State == StateHeld:
		return "VM " + l.VMName + " (held since its pod went, until " + l.Expires.Format(time.RFC3339) + ")"
	case l.VMName != "" && l.Pod.Name != "":
		return fmt.Sprintf("VM %s's pod %s/%s (attachment %s)", l.VMName, l.Pod.Namespace, l.Pod.Name, l.Key())
	case l.Pod.Name != "":
		return fmt.Sprintf("pod %s/%s (attachment %s)", l.Pod.Namespace, l.Pod.Name, l.Key())
	case l.Source == SourceCNI:
		return "attachment " + l.Key().String()
	default:
		return "DHCP client " + l.MAC
	}
}

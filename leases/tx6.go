package leases

// A transaction's IPv6 side: the address a dual-stack reservation
// gets beside its IPv4 one, and the DHCPv6 state of it.

import (
	"fmt"
	"net/netip"
	"time"
)

// dualStack reports whether req gets an IPv6 address: a CNI reservation in
// a store opened WithSubnet6. (DHCPv6 serves CNI reservations only, so a
// dynamic DHCPv4 lease gets none.)
func (tx *Tx) dualStack(req ReserveRequest) bool {
	return req.Source == SourceCNI && tx.s != nil && tx.s.subnet6.IsValid()
}

// reserve6 picks the IPv6 address of a new reservation: the requested one
// if it is free, else the next free one after LastReserved6, round robin
// as for IPv4, never the gateway or the subnet-router anycast address.
func (tx *Tx) reserve6(req ReserveRequest) (netip.Addr, error) {
	f := tx.f
	held := make(map[netip.Addr]*Lease)
	for i := range f.Leases {
		if f.Leases[i].IP6.IsValid() {
			held[f.Leases[i].IP6] = &f.Leases[i]
		}
	}
	pool := poolOf(f.Subnet6)
	if want := req.IP6; want.IsValid() {
		switch {
		case !f.Subnet6.Contains(want):
			return want, fmt.Errorf("requested ip6 %s is outside subnet6 %s", want, f.Subnet6)
		case want == f.Gateway6:
			return want, fmt.Errorf("requested ip6 %s is the gateway of %s", want, f.Subnet6)
		case !pool.contains(want):
			return want, fmt.Errorf("requested ip6 %s is the subnet-router anycast address of %s", want, f.Subnet6)
		case held[want] != nil:
			return want, fmt.Errorf("requested ip6 %s: %w by %s", want, ErrInUse, describe(*held[want]))
		}
		return want, nil
	}
	isHeld := func(a netip.Addr) bool { return held[a] != nil || a == f.Gateway6 }
	if p := req.Prefer6; p.IsValid() && pool.contains(p) && !isHeld(p) {
		return p, nil
	}
	ip6, ok := allocate(pool, f.LastReserved6, Pool{}, isHeld, len(held)+1)
	if !ok {
		return netip.Addr{}, fmt.Errorf("subnet6 %s is full (%d leases hold an address of it): %w", f.Subnet6, len(held), ErrExhausted)
	}
	f.LastReserved6 = ip6
	return ip6, nil
}

// Free6 counts the IPv6 addresses a CNI reservation could still get, for a
// dual-stack store ([WithSubnet6]); 0 for one that is not. Like Free it
// stops at 1<<20.
func (tx *Tx) Free6() int {
	const enough = 1 << 20
	f := tx.f
	if tx.s == nil || !tx.s.subnet6.IsValid() || !f.Subnet6.IsValid() {
		return 0
	}
	pool := poolOf(f.Subnet6)
	size := rangeSize(pool.First, pool.Last)
	if size >= enough {
		return enough
	}
	free := int(size)
	for _, l := range f.Leases {
		if l.IP6.IsValid() && !l.Home6.IsValid() {
			free--
		}
	}
	if pool.contains(f.Gateway6) {
		free--
	}
	return max(free, 0)
}

// indexOfIP6 finds the live lease whose IPv6 address is ip6 (a state and
// source this version knows), or -1.
func (tx *Tx) indexOfIP6(ip6 netip.Addr) int {
	for i, l := range tx.f.Leases {
		if l.IP6.IsValid() && l.IP6 == ip6 {
			return i
		}
	}
	return -1
}

// ByMAC6 returns the lease a DHCPv6 client with this MAC is served from: a
// live lease of the MAC that has an IPv6 address, whatever its IPv6 state
// (the caller checks State6 for a quarantine).
func (tx *Tx) ByMAC6(mac string) (Lease, bool) {
	l, ok := tx.ByMAC(mac)
	if !ok || !l.IP6.IsValid() {
		return Lease{}, false
	}
	return l, true
}

// Bind6 records that the DHCPv6 server gave ip6 to mac until expires
// (REPLY to a REQUEST, RENEW or REBIND). The address must be the IPv6
// address of mac's lease and not quarantined.
func (tx *Tx) Bind6(mac string, ip6 netip.Addr, expires time.Time) (Lease, error) {
	mac, err := NormalizeMAC(mac)
	if err != nil {
		return Lease{}, err
	}
	i := tx.indexOfIP6(ip6)
	if i < 0 {
		return Lease{}, fmt.Errorf("binding %s to %s: %w", ip6, mac, ErrNotFound)
	}
	l := &tx.f.Leases[i]
	switch {
	case !l.Known():
		return Lease{}, fmt.Errorf("binding %s to %s: %w: it is held by %s", ip6, mac, ErrConflict, describe(*l))
	case l.MAC != mac:
		return Lease{}, fmt.Errorf("binding %s to %s: %w: it is held for MAC %q", ip6, mac, ErrConflict, l.MAC)
	case l.State6 == StateDeclined:
		return Lease{}, fmt.Errorf("binding %s to %s: %w: the address is quarantined until %s", ip6, mac, ErrConflict, l.Expires6.Format(time.RFC3339))
	}
	expires = normTime(expires)
	if l.State6 != StateBound || !l.Expires6.Equal(expires) {
		tx.mustWrite()
		l.State6, l.Expires6 = StateBound, expires
	}
	return *l, nil
}

// Release6 handles a DHCPv6 client giving up ip6 (RELEASE): the address
// stays the reservation's, no longer bound. ok is false when mac holds no
// binding of ip6.
func (tx *Tx) Release6(mac string, ip6 netip.Addr) (Lease, bool) {
	mac, err := NormalizeMAC(mac)
	if err != nil {
		return Lease{}, false
	}
	i := tx.indexOfIP6(ip6)
	if i < 0 {
		return Lease{}, false
	}
	l := &tx.f.Leases[i]
	if !l.Known() || l.MAC != mac || l.State6 != StateBound {
		return Lease{}, false
	}
	tx.mustWrite()
	l.State6, l.Expires6 = "", time.Time{}
	return *l, true
}

// Decline6 quarantines ip6 until until, because the client mac found it in
// use on the link (DECLINE, RFC 8415 §18.3.8). The reservation keeps the
// address (it is the VM's; CNI DEL still releases it) but DHCPv6 does not
// hand it out until the quarantine ends.
func (tx *Tx) Decline6(mac string, ip6 netip.Addr, until time.Time) (Lease, error) {
	mac, err := NormalizeMAC(mac)
	if err != nil {
		return Lease{}, err
	}
	i := tx.indexOfIP6(ip6)
	if i < 0 {
		return Lease{}, fmt.Errorf("decline of %s: %w", ip6, ErrNotFound)
	}
	l := &tx.f.Leases[i]
	switch {
	case !l.Known():
		return Lease{}, fmt.Errorf("decline of %s: %w: it is held by %s", ip6, ErrConflict, describe(*l))
	case l.MAC != mac:
		return Lease{}, fmt.Errorf("decline of %s from %s: %w: it is held for MAC %q", ip6, mac, ErrConflict, l.MAC)
	}
	tx.mustWrite()
	l.State6, l.Expires6 = StateDeclined, normTime(until)
	return *l, nil
}

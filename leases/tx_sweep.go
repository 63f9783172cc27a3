package leases

// A transaction's passes over the whole file: CNI GC, expiry, and the
// count of free addresses.

import (
	"net/netip"
	"slices"
	"time"
)

// GC releases every CNI lease whose attachment is not in valid (CNI GC,
// cni.dev/valid-attachments); a VM's lease is held for the VM instead, as
// Release does. DHCP leases are left to expiry, held ones to theirs, and
// leases in a state this version does not know to a version that knows it.
func (tx *Tx) GC(valid []Key) []Lease {
	keep := make(map[Key]bool, len(valid))
	for _, k := range valid {
		keep[k] = true
	}
	var released []Lease
	for i, l := range tx.f.Leases {
		if l.Source == SourceCNI && l.State.Known() && l.State != StateHeld && !keep[l.Key()] {
			released = append(released, l)
			if l.VMName != "" {
				tx.hold(i)
			}
		}
	}
	tx.f.Leases = slices.DeleteFunc(tx.f.Leases, func(l Lease) bool {
		return l.Source == SourceCNI && l.State.Known() && l.State != StateHeld && !keep[l.Key()]
	})
	if len(released) > 0 {
		tx.mustWrite()
	}
	return released
}

// Expire applies the passage of time: an expired DHCP lease, offer or
// quarantine frees its address, and so does a VM's held lease whose hold
// time is over; an expired binding or quarantine of a CNI reservation goes
// back to reserved, because the pod still owns the address. It returns the leases it changed or removed, as they were.
// Leases this version does not know are left alone: what their expiry
// means is their writer's to say.
func (tx *Tx) Expire() []Lease {
	var changed []Lease
	tx.f.Leases = slices.DeleteFunc(tx.f.Leases, func(l Lease) bool {
		if !l.Expired(tx.now) || !l.Known() {
			return false
		}
		changed = append(changed, l)
		return l.Source != SourceCNI || l.State == StateHeld
	})
	for i := range tx.f.Leases {
		l := &tx.f.Leases[i]
		if l.Expired(tx.now) && l.Known() {
			l.State, l.Expires = StateReserved, time.Time{}
		}
		if l.Known() && !l.Expires6.IsZero() && !tx.now.Before(l.Expires6) {
			// A DHCPv6 binding or quarantine that ended: the address is
			// the reservation's again.
			changed = append(changed, *l)
			l.State6, l.Expires6 = "", time.Time{}
		}
	}
	if len(changed) > 0 {
		tx.mustWrite()
	}
	return changed
}

// Free counts the addresses a Reserve over the whole subnet could still
// hand out, not counting those in exclude. For subnets too large to exhaust
// (IPv6) it stops at 1<<20.
func (tx *Tx) Free(exclude Pool) int {
	const enough = 1 << 20
	pool := poolOf(tx.f.Subnet)
	size := rangeSize(pool.First, pool.Last)
	if exclude.First.IsValid() {
		lo, hi := exclude.First, exclude.Last
		if lo.Less(pool.First) {
			lo = pool.First
		}
		if pool.Last.Less(hi) {
			hi = pool.Last
		}
		if !hi.Less(lo) {
			size -= rangeSize(lo, hi)
		}
	}
	if size >= enough {
		return enough
	}
	free := int(size)
	for _, l := range tx.f.Leases {
		if l.Home.IsValid() {
			continue // moved in: an address of another node's subnet
		}
		if !exclude.First.IsValid() || !exclude.contains(l.IP) {
			free--
		}
	}
	if pool.contains(tx.f.Gateway) && (!exclude.First.IsValid() || !exclude.contains(tx.f.Gateway)) {
		free--
	}
	return max(free, 0)
}

// rangeSize is last-first+1, saturating at 1<<32 (enough for any count the
// caller compares it with).
func rangeSize(first, last netip.Addr) uint64 {
	if first.Is4() {
		a, b := first.As4(), last.As4()
		x := uint64(a[0])<<24 | uint64(a[1])<<16 | uint64(a[2])<<8 | uint64(a[3])
		y := uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])
		return y - x + 1
	}
	a, b := first.As16(), last.As16()
	for i := 0; i < 12; i++ {
		if a[i] != b[i] {
			return 1 << 32
		}
	}
	x := uint64(a[12])<<24 | uint64(a[13])<<16 | uint64(a[14])<<8 | uint64(a[15])
	y := uint64(b[12])<<24 | uint64(b[13])<<16 | uint64(b[14])<<8 | uint64(b[15])
	return y - x + 1
}

package dhcp

import (
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/vmlane/vmlane/leases"
)

// StoreAllocator serves leases from a lease file: the CNI plugin's
// reservations and, with a dynamic range, the server's own allocations.
// Every change is one [leases.Store.Update], so it is fsynced before the
// method returns and before the handler replies.
type StoreAllocator struct {
	Store *leases.Store
}

var _ Allocator = StoreAllocator{}

// Lookup returns the live lease of mac.
func (a StoreAllocator) Lookup(mac net.HardwareAddr) (l leases.Lease, ok bool, err error) {
	err = a.Store.View(func(tx *leases.Tx) error {
		l, ok = tx.ByMAC(mac.String())
		return nil
	})
	return l, ok, err
}

// Allocate returns mac's lease or holds a new dynamic one. Expired leases
// are swept in the same transaction first, so a range full of stale offers
// frees up without waiting for a periodic sweep.
func (a StoreAllocator) Allocate(mac net.HardwareAddr, want netip.Addr, pool leases.Pool, holdUntil time.Time) (l leases.Lease, err error) {
	err = a.Store.Update(func(tx *leases.Tx) error {
		tx.Expire()
		if got, ok := tx.ByMAC(mac.String()); ok {
			l = got
			return nil
		}
		req := leases.ReserveRequest{
			Source:  leases.SourceDHCP,
			MAC:     mac.String(),
			Pool:    pool,
			Expires: holdUntil,
		}
		if want.IsValid() && inPool(pool, want) {
			r := req
			r.IP = want
			if got, err := tx.Reserve(r); err == nil {
				l = got
				return nil
			} else if !errors.Is(err, leases.ErrInUse) && !isAddrUnusable(tx, want) {
				return err
			}
		}
		l, err = tx.Reserve(req)
		return err
	})
	return l, err
}

// isAddrUnusable reports whether want failed for a reason that only means
// "pick another" (the gateway, the subnet's network or broadcast address).
func isAddrUnusable(tx *leases.Tx, want netip.Addr) bool {
	_, held := tx.ByIP(want)
	return !held
}

// Bind marks ip bound to mac until expires.
func (a StoreAllocator) Bind(mac net.HardwareAddr, ip netip.Addr, expires time.Time, hostname string) (l leases.Lease, err error) {
	return a.Store.Bind(mac.String(), ip, expires, hostname)
}

// Release handles DHCPRELEASE: a dynamic lease is freed, a CNI reservation
// goes back to reserved.
func (a StoreAllocator) Release(mac net.HardwareAddr) (l leases.Lease, ok bool, err error) {
	err = a.Store.Update(func(tx *leases.Tx) error {
		l, ok = tx.ReleaseMAC(mac.String())
		return nil
	})
	return l, ok, err
}

// Decline quarantines ip until until.
func (a StoreAllocator) Decline(mac net.HardwareAddr, ip netip.Addr, until time.Time) (leases.Lease, error) {
	return a.Store.Decline(ip, mac.String(), until)
}

package dhcp

import (
	"errors"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/vmlane/vmlane/leases"
)

// StoreAllocator serves leases from a lease file: the CNI plugin's
// reservations and, with a dynamic range, the server's own allocations.
// Every change is one [leases.Store.Update], so it is fsynced before the
// method returns and before the handler replies.
type StoreAllocator struct {
	Store *leases.Store
	// cache, when set (NewStoreAllocator), serves Lookup without the
	// lock; nil reads under the lock every time.
	cache *lookupCache
}

var _ Allocator = StoreAllocator{}

// NewStoreAllocator returns a StoreAllocator whose lookups (every DISCOVER
// and REQUEST starts with one) read the lease file without its lock and
// parse it again only when it changed. Writers replace the file by rename,
// so a changed file is a new inode: one stat per packet tells.
func NewStoreAllocator(s *leases.Store) StoreAllocator {
	return StoreAllocator{Store: s, cache: &lookupCache{}}
}

// Lookup returns the live (not declined) lease of mac, expired or not: a
// lapsed binding of a CNI reservation is still the MAC's address.
func (a StoreAllocator) Lookup(mac net.HardwareAddr) (l leases.Lease, ok bool, err error) {
	if a.cache != nil {
		return a.cache.lookup(a.Store.Path(), mac.String())
	}
	err = a.Store.View(func(tx *leases.Tx) error {
		l, ok = tx.ByMAC(mac.String())
		return nil
	})
	return l, ok, err
}

// lookupCache is the last parse of the lease file, keyed by the file's
// identity. Readers never lock the lease file (the rename makes every read
// see a whole file), and a stale answer is harmless: every change a reply
// depends on is made again under the lock (Allocate, Bind), which checks.
type lookupCache struct {
	mu    sync.Mutex
	id    fileID
	file  []leases.Lease
	valid bool
}

type fileID struct {
	ino, size int64
	mtime     time.Time
}

func (c *lookupCache) lookup(path, mac string) (leases.Lease, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		c.valid = false
		return leases.Lease{}, false, nil
	}
	if err != nil {
		return leases.Lease{}, false, err
	}
	id := fileID{size: fi.Size(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.ino = int64(st.Ino)
	}
	if !c.valid || id != c.id {
		snap, err := leases.Read(path)
		if err != nil {
			c.valid = false
			return leases.Lease{}, false, err
		}
		c.file, c.id, c.valid = snap.Leases(), id, true
	}
	m, err := leases.NormalizeMAC(mac)
	if err != nil {
		return leases.Lease{}, false, nil
	}
	for _, l := range c.file {
		if l.MAC == m && l.State != leases.StateDeclined {
			return l, true, nil
		}
	}
	return leases.Lease{}, false, nil
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

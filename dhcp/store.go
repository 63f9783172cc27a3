package dhcp

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vmlane/vmlane/leases"
)

// StoreAllocator serves leases from a lease file: the CNI plugin's
// reservations and, with a dynamic range, the server's own allocations.
// Every change is a [leases.Store.Update], fsynced before the method
// returns and so before the handler replies, but a CNI reservation's bind
// once [StoreAllocator.Defer] is on: that is written within
// [LateBindDelay] after its ACK.
type StoreAllocator struct {
	Store *leases.Store
	// cache, when set (NewStoreAllocator), serves Lookup without the
	// lock; nil reads under the lock every time.
	cache *lookupCache
	// binds, when set (NewStoreAllocator), group-commits Bind; nil binds
	// in a transaction of its own.
	binds *groupCommit
	// late, when set (Defer), writes CNI reservations' binds after their
	// ACK.
	late *lateBinds
}

var _ Allocator = StoreAllocator{}

// NewStoreAllocator returns a StoreAllocator whose lookups (every DISCOVER
// and REQUEST starts with one) read the lease file without its lock and
// parse it again only when another process changed it (after the server's
// own writes, [leases.Store.Snapshot] reuses what the store wrote), and
// whose binds (every ACK) share transactions when they arrive together.
// Call [StoreAllocator.Watch] to learn of changes by inotify instead of
// reading the file (and comparing it with the last one) on every lookup.
func NewStoreAllocator(s *leases.Store) StoreAllocator {
	return StoreAllocator{Store: s, cache: &lookupCache{read: s.Snapshot, version: s.Version, path: s.Path()}, binds: &groupCommit{store: s}}
}

// Watch keeps the lookup cache fresh by change notification on the lease
// folder (inotify on Linux) until ctx ends: the CNI plugin's new and
// released reservations are seen as soon as their write lands, and a lookup
// that hits the cache costs no system call. Lookups still check the file
// itself on a miss (a notification is asynchronous: the reservation a
// DISCOVER asks for may have landed a moment ago) and at least once a
// second (a watch dies with its folder). Without Watch, or where the
// system has no notification, every lookup checks the file.
func (a StoreAllocator) Watch(ctx context.Context) error {
	if a.cache == nil {
		return nil
	}
	changed, stop, err := leases.Watch(a.Store.Path())
	if err != nil {
		return err
	}
	if changed == nil {
		stop()
		return nil
	}
	a.cache.dirty.Store(true)
	a.cache.watched.Store(true)
	go func() {
		defer stop()
		defer a.cache.watched.Store(false)
		for {
			select {
			case <-ctx.Done():
				return
			case <-changed:
				a.cache.dirty.Store(true)
			}
		}
	}()
	return nil
}

// Lookup returns the lease of mac the server serves ([served]), expired
// or not: a lapsed binding of a CNI reservation is still the MAC's
// address. With none but a lease it does not serve (quarantined, or of a
// state or source this version does not know), it returns that, ok false.
func (a StoreAllocator) Lookup(mac net.HardwareAddr) (l leases.Lease, ok bool, err error) {
	if a.cache != nil {
		return a.cache.lookup(mac.String())
	}
	err = a.Store.View(func(tx *leases.Tx) error {
		if l, ok = tx.ByMAC(mac.String()); ok {
			return nil
		}
		l = unserved(tx.Leases(), mac.String())
		return nil
	})
	return l, ok, err
}

// served reports whether the server answers for l: a lease of a MAC that
// is live ([leases.Lease.Live]: not declined, not held, of a state and
// source this version knows). The others hold their address and MAC all
// the same: a declined lease until its quarantine ends, a VM's held lease
// until its next pod or its hold time, one a newer vmlane wrote until a
// version that knows what it means lets it go.
func served(l leases.Lease) bool {
	return l.MAC != "" && l.Live()
}

// rank orders the leases of one MAC by which the server looks up: the
// served one, else one a newer vmlane wrote (it holds the MAC, whatever a
// declined lease beside it would allow), else a declined one.
func rank(l leases.Lease) int {
	switch {
	case served(l):
		return 2
	case !l.Known():
		return 1
	default:
		return 0
	}
}

// unserved returns the lease of mac among ls that the server does not
// serve and ranks first, zero if none.
func unserved(ls []leases.Lease, mac string) leases.Lease {
	m, err := leases.NormalizeMAC(mac)
	if err != nil {
		return leases.Lease{}
	}
	var out leases.Lease
	for _, l := range ls {
		if l.MAC == m && !served(l) && (out.MAC == "" || rank(l) > rank(out)) {
			out = l
		}
	}
	return out
}

// lookupCache is the last parse of the lease file, indexed by MAC. Readers
// never lock the lease file (the rename makes every read see a whole
// file).
//
// Whether the file changed is told two ways. The cheap one is the file's
// identity (inode, size, mtime): a changed identity is a changed file. The
// converse does not hold: after a CNI DEL and ADD a rewritten file often
// has the inode of the one before (ext4 hands a freed inode out again at
// once), the same size and, within one tick of the file system's clock,
// the same mtime. An answer from such a stale view is harmless where every
// decision that depends on it is made again under the lease file's lock
// (an OFFER, a NAK, a bind written before its ACK). It is not harmless for
// an ACK sent before its bind is written (a CNI reservation's, see
// bindLater): trusting the identity there ACKed a REQUEST for an address
// that had gone to another pod. So lookupFresh, which that ACK waits for,
// decides by content ([leases.Store.Version]: a read and a compare).
type lookupCache struct {
	// read reads the file: leases.Store.Snapshot, which skips the parse
	// when the file is the one the store last wrote (the server's own
	// previous bind, the common case), so the cache costs a decode only
	// when another process wrote.
	read func() (*leases.Snapshot, error)
	// version is leases.Store.Version: a read and a compare.
	version func() (uint64, error)
	path    string

	// watched: a watcher sets dirty on every change, so a clean cache
	// younger than maxTrust needs no look at the file.
	watched, dirty atomic.Bool

	mu sync.Mutex
	// id and ver are the identity and version of the file byMAC was
	// made from. Guarded by mu.
	id  fileID
	ver uint64
	// byMAC holds each MAC's served lease or, when it has none, one it
	// has that is not served. Guarded by mu.
	byMAC   map[string]leases.Lease
	valid   bool      // guarded by mu
	checked time.Time // last look at the file; guarded by mu
}

type fileID struct {
	ino, size int64
	mtime     time.Time
}

// statID returns the identity of the file at path; exists is false when
// there is no file.
func statID(path string) (id fileID, exists bool, err error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fileID{}, false, nil
	}
	if err != nil {
		return fileID{}, false, err
	}
	id = fileID{size: fi.Size(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.ino = int64(st.Ino)
	}
	return id, true, nil
}

// maxTrust is how long a watched cache is believed without a look at the
// file.
const maxTrust = time.Second

// lookupFresh is lookup without trusting the watch or the file's
// identity: the content is checked (a read and a compare, and a parse only
// if it changed). An ACK sent before its bind is written depends on it.
func (c *lookupCache) lookupFresh(mac string) (leases.Lease, bool, error) {
	m, err := leases.NormalizeMAC(mac)
	if err != nil {
		return leases.Lease{}, false, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.refreshLocked(true); err != nil {
		return leases.Lease{}, false, err
	}
	l := c.byMAC[m]
	return l, served(l), nil
}

func (c *lookupCache) lookup(mac string) (leases.Lease, bool, error) {
	m, err := leases.NormalizeMAC(mac)
	if err != nil {
		return leases.Lease{}, false, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.valid && c.watched.Load() && !c.dirty.Load() && time.Since(c.checked) < maxTrust {
		if l, ok := c.byMAC[m]; ok && served(l) {
			return l, true, nil
		}
	}
	if err := c.refreshLocked(false); err != nil {
		return leases.Lease{}, false, err
	}
	l := c.byMAC[m]
	return l, served(l), nil
}

// refreshLocked re-indexes the file when it changed; strict, it does not
// take an unchanged identity for an unchanged file. The dirty flag is
// cleared before the look, so a change that lands during it marks the
// cache dirty again. Identity and version are taken before the snapshot:
// a write in between leaves the cache under an older identity or version
// than its content, which costs one more read later, never a stale answer.
// c.mu must be held.
func (c *lookupCache) refreshLocked(strict bool) error {
	c.dirty.Store(false)
	now := time.Now()
	c.checked = now
	id, exists, err := statID(c.path)
	if err != nil || !exists {
		c.byMAC, c.valid = nil, false
		return err
	}
	if !strict && c.valid && id == c.id {
		return nil
	}
	v, err := c.version()
	if errors.Is(err, fs.ErrNotExist) {
		c.byMAC, c.valid = nil, false
		return nil
	}
	if err != nil {
		c.byMAC, c.valid = nil, false
		return err
	}
	if c.valid && v == c.ver {
		c.id = id
		return nil
	}
	byMAC, err := c.load()
	if err != nil {
		c.byMAC, c.valid = nil, false
		return err
	}
	c.byMAC, c.id, c.ver, c.valid = byMAC, id, v, true
	return nil
}

// prefetch brings the cache up to date with the file off the request
// path: the server calls it right after writing the file itself, so the
// next lookup finds the cache current instead of re-reading. The file is
// read without c.mu held, so lookups go on meanwhile; identity and version
// are taken first, as in refreshLocked. A refresh by a lookup in the
// meantime wins.
func (c *lookupCache) prefetch() {
	now := time.Now()
	id, exists, err := statID(c.path)
	if err != nil || !exists {
		return
	}
	v, err := c.version()
	if err != nil {
		return
	}
	c.mu.Lock()
	current := c.valid && v == c.ver
	seenVer, seenValid := c.ver, c.valid
	c.mu.Unlock()
	if current {
		return
	}
	byMAC, err := c.load()
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// A lookup that refreshed meanwhile has as new a view or newer; do not
	// put an older one back, which a watched cache would then trust.
	if c.ver != seenVer || c.valid != seenValid {
		return
	}
	c.byMAC, c.id, c.ver, c.valid, c.checked = byMAC, id, v, true, now
}

// load reads the file and indexes it by MAC: each MAC's served lease or,
// when it has none, one that is not served (a newer vmlane's, else a
// declined one; see rank).
func (c *lookupCache) load() (map[string]leases.Lease, error) {
	snap, err := c.read()
	if err != nil {
		return nil, err
	}
	byMAC := make(map[string]leases.Lease, len(snap.Leases()))
	for _, l := range snap.Leases() {
		if l.MAC == "" {
			continue
		}
		// The first of the best rank: an unserved one says why.
		if prev, seen := byMAC[l.MAC]; !seen || rank(l) > rank(prev) {
			byMAC[l.MAC] = l
		}
	}
	return byMAC, nil
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
// Binds that arrive together share one transaction (see groupCommit); each
// returns once its own bind is durable.
func (a StoreAllocator) Bind(mac net.HardwareAddr, ip netip.Addr, expires time.Time, hostname string) (l leases.Lease, err error) {
	if a.late != nil {
		if l, ok := a.bindLater(mac.String(), ip, expires, hostname); ok {
			return l, nil
		}
	}
	if a.binds != nil {
		return a.binds.bind(mac.String(), ip, expires, hostname)
	}
	return a.Store.Bind(mac.String(), ip, expires, hostname)
}

// Release handles DHCPRELEASE: a dynamic lease is freed, a CNI reservation
// goes back to reserved.
func (a StoreAllocator) Release(mac net.HardwareAddr) (l leases.Lease, ok bool, err error) {
	a.Flush() // a deferred bind must not land after the release and undo it
	err = a.Store.Update(func(tx *leases.Tx) error {
		l, ok = tx.ReleaseMAC(mac.String())
		return nil
	})
	return l, ok, err
}

// Decline quarantines ip until until.
func (a StoreAllocator) Decline(mac net.HardwareAddr, ip netip.Addr, until time.Time) (leases.Lease, error) {
	a.Flush() // as in Release
	return a.Store.Decline(ip, mac.String(), until)
}

var _ Allocator6 = StoreAllocator{}

// Bind6 marks ip6 bound to mac until expires, with the durability of
// Bind: group-committed, and once Defer is on acknowledged at once and
// written within LateBindDelay (every DHCPv6 address is a CNI
// reservation's, on disk before its VM exists). A DHCPv6 bind touches only
// the lease's IPv6 members, so a DHCPv4 bind of the same lease in the same
// batch lands beside it.
func (a StoreAllocator) Bind6(mac net.HardwareAddr, ip6 netip.Addr, expires time.Time) (leases.Lease, error) {
	if a.late != nil {
		if l, ok := a.bindLater6(mac.String(), ip6, expires); ok {
			return l, nil
		}
	}
	if a.binds != nil {
		return a.binds.bind6(mac.String(), ip6, expires)
	}
	return a.Store.Bind6(mac.String(), ip6, expires)
}

// Release6 handles a DHCPv6 RELEASE, after the binds Defer let wait.
func (a StoreAllocator) Release6(mac net.HardwareAddr, ip6 netip.Addr) (leases.Lease, bool, error) {
	a.Flush() // a deferred bind must not land after the release and undo it
	return a.Store.Release6(mac.String(), ip6)
}

// Decline6 quarantines ip6, declined by mac, until until.
func (a StoreAllocator) Decline6(mac net.HardwareAddr, ip6 netip.Addr, until time.Time) (leases.Lease, error) {
	a.Flush() // as in Release6
	return a.Store.Decline6(mac.String(), ip6, until)
}

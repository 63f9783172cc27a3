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
	"time"

	"golang.org/x/sys/unix"

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
	return StoreAllocator{Store: s, cache: &lookupCache{read: s.Snapshot, path: s.Path()}, binds: &groupCommit{store: s}}
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
// Whether the file changed is told by its identity: device, inode, size,
// mtime and ctime. Every writer replaces the file by a rename (the store's
// atomic write), so a changed file is a new inode, with one catch: after a
// CNI DEL and ADD a rewritten file can get the inode of a file before it
// (ext4 hands a freed inode out again at once), with the same size and,
// within one tick of the file system's clock, the same times. An answer
// from such a stale view is harmless where every decision that depends on
// it is made again under the lease file's lock (an OFFER, a NAK, a bind
// written before its ACK). It is not harmless for an ACK sent before its
// bind is written (a CNI reservation's, see bindLater): trusting a bare
// identity there ACKed a REQUEST for an address that had gone to another
// pod. So the cache keeps the file it parsed open (held): an inode that is
// open is not freed, so no later file can have its number, and the same
// inode number at the path is the same file. lookupFresh, which that ACK
// waits for, trusts the identity only with the file held; it used to read
// the whole file and compare it, a fifth of the server's CPU at one
// exchange in flight.
type lookupCache struct {
	// read reads the file: leases.Store.Snapshot, which skips the parse
	// when the file is the one the store last wrote (the server's own
	// previous bind, the common case), so the cache costs a decode only
	// when another process wrote.
	read func() (*leases.Snapshot, error)
	path string

	// watched: a watcher sets dirty on every change, so a clean cache
	// younger than maxTrust needs no look at the file.
	watched, dirty atomic.Bool

	mu sync.Mutex
	// held is the file byMAC was parsed from (or an older one: see
	// refreshLocked), open; id is its identity. Guarded by mu.
	held *os.File
	id   fileID
	// byMAC holds each MAC's served lease or, when it has none, one it
	// has that is not served. Guarded by mu.
	byMAC   map[string]leases.Lease
	valid   bool      // guarded by mu
	checked time.Time // last look at the file; guarded by mu
}

type fileID struct {
	dev, ino, size int64
	mtime, ctime   int64 // nanoseconds
}

// identity returns the identity of a file's stat.
func identity(st *unix.Stat_t) fileID {
	return fileID{dev: int64(st.Dev), ino: int64(st.Ino), size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}

// statID returns the identity of the file at path; exists is false when
// there is no file.
func statID(path string) (id fileID, exists bool, err error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return fileID{}, false, nil
		}
		return fileID{}, false, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	return identity(&st), true, nil
}

// maxTrust is how long a watched cache is believed without a look at the
// file.
const maxTrust = time.Second

// lookupFresh is lookup without trusting the watch, and the file's
// identity only while the cache holds the file (see lookupCache). An ACK
// sent before its bind is written depends on it.
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

// refreshLocked re-indexes the file when it changed; strict, it takes an
// unchanged identity for an unchanged file only while the file is held.
// The dirty flag is cleared before the look, so a change that lands during
// it marks the cache dirty again. The file is opened before it is read: a
// write in between leaves the cache holding an older file than its
// content, which costs one more read later, never a stale answer.
// c.mu must be held.
func (c *lookupCache) refreshLocked(strict bool) error {
	c.dirty.Store(false)
	c.checked = time.Now()
	id, exists, err := statID(c.path)
	if err != nil || !exists {
		c.forgetLocked()
		return err
	}
	if c.valid && id == c.id && (!strict || c.held != nil) {
		return nil
	}
	f, fid, err := c.open()
	if f == nil {
		c.forgetLocked()
		return err
	}
	byMAC, err := c.load()
	if err != nil {
		f.Close()
		c.forgetLocked()
		return err
	}
	c.forgetLocked()
	c.held, c.id, c.byMAC, c.valid = f, fid, byMAC, true
	return nil
}

// open opens the file and returns it with its identity; nil and no error
// when there is no file.
func (c *lookupCache) open() (*os.File, fileID, error) {
	f, err := os.Open(c.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fileID{}, nil
	}
	if err != nil {
		return nil, fileID{}, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, fileID{}, &fs.PathError{Op: "fstat", Path: c.path, Err: err}
	}
	return f, identity(&st), nil
}

// forgetLocked drops the cached view and closes the held file. c.mu must
// be held.
func (c *lookupCache) forgetLocked() {
	if c.held != nil {
		c.held.Close()
	}
	c.held, c.id, c.byMAC, c.valid = nil, fileID{}, nil, false
}

// prefetch brings the cache up to date with the file off the request
// path: the server calls it right after writing the file itself, so the
// next lookup finds the cache current instead of re-reading. The file is
// read without c.mu held, so lookups go on meanwhile, and opened first, as
// in refreshLocked. A refresh by a lookup in the meantime wins.
func (c *lookupCache) prefetch() {
	now := time.Now()
	f, fid, err := c.open()
	if f == nil || err != nil {
		return
	}
	c.mu.Lock()
	current := c.valid && c.held != nil && fid == c.id
	seen, seenValid := c.id, c.valid
	c.mu.Unlock()
	if current {
		f.Close()
		return
	}
	byMAC, err := c.load()
	if err != nil {
		f.Close()
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// A lookup that refreshed meanwhile has as new a view or newer; do not
	// put an older one back, which a watched cache would then trust.
	if c.id != seen || c.valid != seenValid {
		f.Close()
		return
	}
	c.forgetLocked()
	c.held, c.id, c.byMAC, c.valid, c.checked = f, fid, byMAC, true, now
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

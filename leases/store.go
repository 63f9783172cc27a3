package leases

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/vmlane/vmlane/internal/atomicfile"
)

// Errors callers branch on. Returned errors wrap these with context, so test
// them with errors.Is.
var (
	// ErrExhausted: every usable address of the subnet (or pool) is held.
	ErrExhausted = errors.New("no free address")
	// ErrInUse: a requested address, or MAC, is held by another lease.
	ErrInUse = errors.New("already in use")
	// ErrNotFound: no lease matches.
	ErrNotFound = errors.New("no such lease")
	// ErrCorrupt: the lease file on disk cannot be read. The store refuses
	// to write over it, so no lease in it is lost; an operator must look.
	ErrCorrupt = errors.New("lease file unreadable")
	// ErrSubnetChanged: the file holds leases of another subnet than the
	// store was opened with (the node's podCIDR changed under live leases).
	ErrSubnetChanged = errors.New("lease file belongs to another subnet")
	// ErrConflict: the request contradicts what the lease already says (a
	// retried ADD asking for another IP, a bind from another MAC).
	ErrConflict = errors.New("conflicts with existing lease")
	// ErrLockTimeout: the lease file's lock stayed held longer than a
	// write ever takes; its holder hangs. The caller may retry.
	ErrLockTimeout = errors.New("lease file lock timed out")
	// ErrVMInUse: a live attachment of another pod holds the VM's
	// addresses (two pods of one VM on one node).
	ErrVMInUse = errors.New("VM already attached")
)

// Store is the writers' view of a lease file. It trusts no lease state in
// memory: every operation reads the file under the lock, so any number of
// processes (one per CNI call, the DHCP server, vmlanectl) can share a file.
// It only remembers the last version of the file it decoded or wrote, to
// skip the decode when the bytes it reads are those again. A Store is safe
// for concurrent use.
type Store struct {
	path     string
	lockPath string
	subnet   netip.Prefix
	gateway  netip.Addr
	// subnet6 and gateway6 are zero unless WithSubnet6 gave them.
	subnet6  netip.Prefix
	gateway6 netip.Addr
	node     string
	vmHold   time.Duration
	now      func() time.Time
	cache    parseCache
}

// Option configures a Store.
type Option func(*Store)

// WithNode records the node name in the file.
func WithNode(name string) Option { return func(s *Store) { s.node = name } }

// WithSubnet6 makes the store dual-stack: each CNI reservation also gets an
// address of subnet6, which must be an IPv6 prefix of /64 to /120 holding
// gateway6 (the bridge's address). A store opened without it leaves the
// file's IPv6 members as they are and hands out no IPv6 address.
func WithSubnet6(subnet6 netip.Prefix, gateway6 netip.Addr) Option {
	return func(s *Store) { s.subnet6, s.gateway6 = subnet6, gateway6 }
}

// WithVMHold sets how long a VM's lease is held (StateHeld) once its
// attachment goes; DefaultVMHold if not given. It must be positive.
func WithVMHold(d time.Duration) Option { return func(s *Store) { s.vmHold = d } }

// WithClock replaces time.Now, for tests.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// Open returns a store for the lease file at path, for the given subnet and
// gateway. It creates the folder if needed but does not touch the file: the
// first change creates it. Open fails on a subnet with no usable address or a
// gateway that is not a usable address of the subnet.
func Open(path string, subnet netip.Prefix, gateway netip.Addr, opts ...Option) (*Store, error) {
	if err := checkSubnet(subnet, gateway); err != nil {
		return nil, err
	}
	s := &Store{
		path:     path,
		lockPath: path + ".lock",
		subnet:   subnet,
		gateway:  gateway,
		vmHold:   DefaultVMHold,
		now:      time.Now,
	}
	for _, o := range opts {
		o(s)
	}
	if s.vmHold <= 0 {
		return nil, fmt.Errorf("VM hold time %s: must be positive", s.vmHold)
	}
	if s.subnet6.IsValid() || s.gateway6.IsValid() {
		if err := CheckSubnet6(s.subnet6, s.gateway6); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("creating lease folder: %w", err)
	}
	s.sweepTemps()
	return s, nil
}

// OpenRecorded opens a store for the lease file at path in the subnets the
// file itself records (subnet, gateway, and subnet6 and gateway6 when it
// has them), for a writer that has no network config of its own or whose
// config names another subnet: vmlanectl, a DEL after the node's podCIDR
// changed. The file must exist and read; opts come after the subnets.
func OpenRecorded(path string, opts ...Option) (*Store, error) {
	snap, err := Read(path)
	if err != nil {
		return nil, err
	}
	f := snap.File
	if f.Subnet6.IsValid() {
		opts = append([]Option{WithSubnet6(f.Subnet6, f.Gateway6)}, opts...)
	}
	s, err := Open(path, f.Subnet, f.Gateway, opts...)
	if err != nil {
		return nil, fmt.Errorf("lease file %s records subnet %s, gateway %s: %w", path, f.Subnet, f.Gateway, err)
	}
	return s, nil
}

func checkSubnet(subnet netip.Prefix, gateway netip.Addr) error {
	if !subnet.IsValid() {
		return errors.New("subnet is not a valid CIDR")
	}
	if subnet != subnet.Masked() {
		return fmt.Errorf("subnet %s has host bits set (did you mean %s?)", subnet, subnet.Masked())
	}
	if !gateway.IsValid() {
		return fmt.Errorf("gateway is not a valid address")
	}
	if !subnet.Contains(gateway) {
		return fmt.Errorf("gateway %s is outside subnet %s", gateway, subnet)
	}
	p := poolOf(subnet)
	if !p.contains(gateway) {
		return fmt.Errorf("gateway %s is the network or broadcast address of %s", gateway, subnet)
	}
	if p.First == p.Last {
		return fmt.Errorf("subnet %s has no usable address besides the gateway", subnet)
	}
	return nil
}

// The sizes of IPv6 pod subnet a store takes: a /64 is what a podCIDR is
// in most clusters (the node IPAM controller's default mask size for IPv6);
// more than a /120's 255 addresses lets a node run out of none.
const (
	MinSubnet6Bits = 64
	MaxSubnet6Bits = 120
)

// CheckSubnet6 checks an IPv6 pod subnet and its gateway.
func CheckSubnet6(subnet6 netip.Prefix, gateway6 netip.Addr) error {
	switch {
	case !subnet6.IsValid():
		return errors.New("subnet6 is not a valid CIDR")
	case !subnet6.Addr().Is6() || subnet6.Addr().Is4In6():
		return fmt.Errorf("subnet6 %s is not IPv6", subnet6)
	case subnet6 != subnet6.Masked():
		return fmt.Errorf("subnet6 %s has host bits set (did you mean %s?)", subnet6, subnet6.Masked())
	case subnet6.Bits() < MinSubnet6Bits || subnet6.Bits() > MaxSubnet6Bits:
		return fmt.Errorf("subnet6 %s: the prefix length must be /%d to /%d", subnet6, MinSubnet6Bits, MaxSubnet6Bits)
	case !gateway6.IsValid():
		return fmt.Errorf("gateway6 is not a valid address")
	case !subnet6.Contains(gateway6) || gateway6 == subnet6.Addr():
		return fmt.Errorf("gateway6 %s is not a usable address of %s", gateway6, subnet6)
	}
	return nil
}

// sweepTemps removes stale temp files if there are any, taking the lock
// only then, so the common Open costs one readdir.
func (s *Store) sweepTemps() {
	if m, _ := filepath.Glob(filepath.Join(filepath.Dir(s.path), "."+filepath.Base(s.path)+".tmp-*")); len(m) == 0 {
		return
	}
	if lk, err := lockFile(s.lockPath); err == nil {
		s.removeStaleTempsLocked()
		lk.unlock()
	}
}

// Path is the lease file's path.
func (s *Store) Path() string { return s.path }

// Subnet is the subnet the store allocates from.
func (s *Store) Subnet() netip.Prefix { return s.subnet }

// Subnet6 returns the store's IPv6 subnet, zero unless WithSubnet6 set it.
func (s *Store) Subnet6() netip.Prefix { return s.subnet6 }

// Gateway6 returns the store's IPv6 gateway, zero unless WithSubnet6 set it.
func (s *Store) Gateway6() netip.Addr { return s.gateway6 }

// Gateway is the subnet's gateway, never handed out.
func (s *Store) Gateway() netip.Addr { return s.gateway }

// Update runs fn on the current file under the lock and, if fn changed
// anything and returned nil, writes the result before the lock is released.
// When fn returns an error nothing is written: several changes in one Update
// land together or not at all, which is also how a caller batches many
// changes into one fsync (group commit).
func (s *Store) Update(fn func(tx *Tx) error) error {
	lk, err := lockFile(s.lockPath)
	if err != nil {
		return err
	}
	locked := true
	defer func() {
		if locked {
			lk.unlock()
		}
	}()
	f, err := s.loadLocked()
	if err != nil {
		return err
	}
	tx := &Tx{f: f, s: s, now: normTime(s.now())}
	if err := fn(tx); err != nil {
		return err
	}
	if !tx.changed {
		return nil
	}
	if err := s.replaceLocked(f); err != nil {
		return err
	}
	// The lock goes before the folder's fsync, so the next writer's
	// write overlaps this journal commit instead of queueing behind it
	// (see atomicfile.Replace); Update still returns only once the
	// change is durable.
	locked = false
	lk.unlock()
	if err := atomicfile.SyncDir(filepath.Dir(s.path)); err != nil {
		return fmt.Errorf("writing lease file: %w", err)
	}
	return nil
}

// View runs fn on the current file under the lock, without writing.
func (s *Store) View(fn func(tx *Tx) error) error {
	lk, err := lockFile(s.lockPath)
	if err != nil {
		return err
	}
	defer lk.unlock()
	f, err := s.loadLocked()
	if err != nil {
		return err
	}
	return fn(&Tx{f: f, s: s, now: normTime(s.now()), readOnly: true})
}

// loadLocked reads the file and returns a copy the caller may change; the
// caller holds the file lock. A missing file is an empty one. A file of
// another subnet is adopted only when it holds no lease, so a podCIDR
// change never silently drops live leases.
func (s *Store) loadLocked() (*File, error) {
	data, f, err := s.cache.read(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return &File{Version: Version, Node: s.node, Subnet: s.subnet, Gateway: s.gateway, Subnet6: s.subnet6, Gateway6: s.gateway6}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading lease file %s: %w", s.path, err)
	}
	if f == nil {
		if f, err = s.cache.decode(data); err != nil {
			return nil, fmt.Errorf("%w: %s: %v (the store will not write over it; rebuild it from the node with vmlanectl leases repair)", ErrCorrupt, s.path, err)
		}
	}
	if f.Subnet != s.subnet {
		if len(f.Leases) > 0 {
			return nil, fmt.Errorf("%w: %s holds %d leases of subnet %s, not %s", ErrSubnetChanged, s.path, len(f.Leases), f.Subnet, s.subnet)
		}
		f.Subnet, f.LastReserved = s.subnet, netip.Addr{}
	}
	f.Gateway = s.gateway
	if s.subnet6.IsValid() {
		if f.Subnet6 != s.subnet6 {
			if n := countIP6(f.Leases); n > 0 {
				return nil, fmt.Errorf("%w: %s holds %d IPv6 addresses of subnet6 %s, not %s", ErrSubnetChanged, s.path, n, f.Subnet6, s.subnet6)
			}
			f.Subnet6, f.LastReserved6 = s.subnet6, netip.Addr{}
		}
		f.Gateway6 = s.gateway6
	}
	if s.node != "" {
		f.Node = s.node
	}
	return f, nil
}

func countIP6(ls []Lease) int {
	n := 0
	for _, l := range ls {
		if l.IP6.IsValid() {
			n++
		}
	}
	return n
}

// writeLocked writes f durably, which it takes over: the cache keeps it as
// the decode of what was written. The caller holds the file lock.
func (s *Store) writeLocked(f *File) error {
	// The lowest version that can hold what the file holds: a file goes
	// back to version 1 once its last lease that moved in is gone.
	f.Version = f.formatVersion()
	if err := s.replaceLocked(f); err != nil {
		return err
	}
	if err := atomicfile.SyncDir(filepath.Dir(s.path)); err != nil {
		return fmt.Errorf("writing lease file: %w", err)
	}
	return nil
}

// replaceLocked is writeLocked up to the folder's fsync (see
// atomicfile.Replace): the caller runs SyncDir before it reports the
// write. The caller holds the file lock.
func (s *Store) replaceLocked(f *File) error {
	data, err := f.Encode()
	if err != nil {
		s.cache.clear()
		return fmt.Errorf("encoding lease file: %w", err)
	}
	// Recorded before the rename publishes it (see parseCache): a
	// reader that reads the new file before Replace returns finds it.
	s.cache.wrote(data, f)
	if err := atomicfile.Replace(s.path, data, 0o644); err != nil {
		// The file holds the old bytes or, if only the folder's fsync
		// failed, the new ones: either way the next read decodes it.
		s.cache.clear()
		s.removeStaleTempsLocked()
		return fmt.Errorf("writing lease file: %w", err)
	}
	return nil
}

// Snapshot reads the store's file without the lock, as [Read] does, and
// returns what Read would. When the file's bytes are those this Store last
// wrote or decoded, it skips the decode: a process that is the file's main
// writer (the DHCP server) then pays for a parse only when another process
// wrote. The snapshot is the caller's own: changing it changes nothing in
// the store.
func (s *Store) Snapshot() (*Snapshot, error) {
	data, f, err := s.cache.read(s.path)
	if err != nil {
		return nil, fmt.Errorf("lease file %s: %w", s.path, err)
	}
	if f == nil {
		if isBootpd(string(data)) {
			// Not a file a Store writes; read it as Read would.
			snap, err := parse(string(data))
			if err != nil {
				return nil, fmt.Errorf("lease file %s: %w", s.path, err)
			}
			return snap, nil
		}
		if f, err = s.cache.decode(data); err != nil {
			return nil, fmt.Errorf("lease file %s: %w", s.path, err)
		}
	}
	return NewSnapshot(*f), nil
}

// Version returns a number that is the same for two calls exactly when
// the file's bytes were the same (as far as this Store has seen: each
// change it reads or writes gets a new one). A reader that indexes a
// Snapshot keeps its index while the number stays, at the cost of a read
// and a compare, never trusting the file's identity: a rewritten file
// often has the inode, size and mtime of the one before (see parseCache).
// A file that does not exist is an error (fs.ErrNotExist); a file this
// Store cannot decode is one too.
func (s *Store) Version() (uint64, error) {
	v, err := s.cache.version(s.path)
	if err != nil {
		return 0, fmt.Errorf("lease file %s: %w", s.path, err)
	}
	return v, nil
}

// removeStaleTempsLocked deletes temp files that writers killed mid-write
// left behind. Under the lock no other writer is writing, so every temp file
// of ours is stale. It runs on Open and after a failed write (a full disk
// wants the space back), not on every write.
func (s *Store) removeStaleTempsLocked() {
	matches, _ := filepath.Glob(filepath.Join(filepath.Dir(s.path), "."+filepath.Base(s.path)+".tmp-*"))
	for _, m := range matches {
		os.Remove(m)
	}
}

// Reserve holds an address for req; see [Tx.Reserve].
func (s *Store) Reserve(req ReserveRequest) (l Lease, err error) {
	err = s.Update(func(tx *Tx) error {
		l, err = tx.Reserve(req)
		return err
	})
	return l, err
}

// Release frees the lease of a CNI attachment; see [Tx.Release].
func (s *Store) Release(key Key) (l Lease, ok bool, err error) {
	err = s.Update(func(tx *Tx) error {
		l, ok = tx.Release(key)
		return nil
	})
	return l, ok, err
}

// Bind marks the lease of ip as bound to mac until expires; see [Tx.Bind].
func (s *Store) Bind(mac string, ip netip.Addr, expires time.Time, hostname string) (l Lease, err error) {
	err = s.Update(func(tx *Tx) error {
		l, err = tx.Bind(mac, ip, expires, hostname)
		return err
	})
	return l, err
}

// Bind6 runs [Tx.Bind6] in its own transaction.
func (s *Store) Bind6(mac string, ip6 netip.Addr, expires time.Time) (l Lease, err error) {
	err = s.Update(func(tx *Tx) error {
		l, err = tx.Bind6(mac, ip6, expires)
		return err
	})
	return l, err
}

// Release6 runs [Tx.Release6] in its own transaction.
func (s *Store) Release6(mac string, ip6 netip.Addr) (l Lease, ok bool, err error) {
	err = s.Update(func(tx *Tx) error {
		l, ok = tx.Release6(mac, ip6)
		return nil
	})
	return l, ok, err
}

// Decline6 runs [Tx.Decline6] in its own transaction.
func (s *Store) Decline6(mac string, ip6 netip.Addr, until time.Time) (l Lease, err error) {
	err = s.Update(func(tx *Tx) error {
		l, err = tx.Decline6(mac, ip6, until)
		return err
	})
	return l, err
}

// Decline quarantines ip until until; see [Tx.Decline].
func (s *Store) Decline(ip netip.Addr, mac string, until time.Time) (l Lease, err error) {
	err = s.Update(func(tx *Tx) error {
		l, err = tx.Decline(ip, mac, until)
		return err
	})
	return l, err
}

// GC releases every CNI lease whose attachment is not in valid; see [Tx.GC].
func (s *Store) GC(valid []Key) (released []Lease, err error) {
	err = s.Update(func(tx *Tx) error {
		released = tx.GC(valid)
		return nil
	})
	return released, err
}

// Expire applies expiry to every lease whose time has passed; see
// [Tx.Expire].
func (s *Store) Expire() (changed []Lease, err error) {
	err = s.Update(func(tx *Tx) error {
		changed = tx.Expire()
		return nil
	})
	return changed, err
}

// Get returns the lease of a CNI attachment.
func (s *Store) Get(key Key) (l Lease, ok bool, err error) {
	err = s.View(func(tx *Tx) error {
		l, ok = tx.Get(key)
		return nil
	})
	return l, ok, err
}

// List returns every lease, sorted by IP.
func (s *Store) List() (ls []Lease, err error) {
	err = s.View(func(tx *Tx) error {
		ls = tx.Leases()
		return nil
	})
	return ls, err
}

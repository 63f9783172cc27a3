package dhcp

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/vmlane/vmlane/leases"
)

// LateBindDelay is how long the bind of a CNI reservation may wait before
// it is written, once [StoreAllocator.Defer] allows it: binds that arrive
// within it share one write. Each write costs the server a few
// milliseconds of encoding and fsync that requests arriving meanwhile
// wait behind: at 20 ms one DORA exchange in forty did, which put the p99
// of a lone client at twice dnsmasq's (internal/bench/dhcpbench); at 100 ms it
// is below dnsmasq's.
const LateBindDelay = 100 * time.Millisecond

// lateBinds holds binds of CNI reservations whose ACK has already left.
// A reservation is on disk before the VM exists (the CNI plugin wrote it),
// so the address is the MAC's whatever happens to the server: what a
// deferred bind adds is the state "bound" and the lease's expiry, and a
// crash that loses the last LateBindDelay of those loses nothing a client
// or another pod depends on, and the guest's renewal writes it again. Dynamic
// allocations never come here: theirs is the only record of the address.
type lateBinds struct {
	g     *groupCommit
	delay time.Duration
	log   *slog.Logger
	// after runs after each write (the lookup cache's prefetch).
	after func()

	mu      sync.Mutex
	queued  []*bindReq // guarded by mu
	timer   bool       // a flush is scheduled; guarded by mu
	flushed sync.Cond  // signalled after each flush; L is &mu
	busy    int        // flushes running; guarded by mu
}

func newLateBinds(g *groupCommit, delay time.Duration, log *slog.Logger) *lateBinds {
	lb := &lateBinds{g: g, delay: delay, log: log}
	lb.flushed.L = &lb.mu
	return lb
}

// add queues r; it is written within the delay.
func (lb *lateBinds) add(r *bindReq) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	lb.queued = append(lb.queued, r)
	if !lb.timer {
		lb.timer = true
		time.AfterFunc(lb.delay, lb.flush)
	}
}

// flush writes what is queued, in one transaction.
func (lb *lateBinds) flush() {
	lb.mu.Lock()
	batch := lb.queued
	lb.queued, lb.timer = nil, false
	lb.busy++
	lb.mu.Unlock()
	if len(batch) > 0 {
		lb.g.commit(batch)
		if lb.after != nil {
			lb.after()
		}
		for _, r := range batch {
			if r.err != nil {
				// The reservation changed between the ACK and the write
				// (CNI DEL, a DECLINE): the client learns at its renewal,
				// which gets a NAK.
				lb.log.Warn("deferred bind not written", "mac", r.mac, "ip", r.ip, "err", r.err)
			}
		}
	}
	lb.mu.Lock()
	lb.busy--
	lb.flushed.Broadcast()
	lb.mu.Unlock()
}

// wait writes what is queued now and waits for flushes in progress.
func (lb *lateBinds) wait() {
	lb.flush()
	lb.mu.Lock()
	for lb.busy > 0 {
		lb.flushed.Wait()
	}
	lb.mu.Unlock()
}

// Defer lets the server acknowledge a CNI reservation's bind before the
// bind is written, batching those writes within [LateBindDelay], until ctx
// ends; [StoreAllocator.Flush] writes what is pending (call it before the
// process exits). Without Defer every bind is durable before its ACK.
// The returned allocator shares the receiver's state.
func (a StoreAllocator) Defer(ctx context.Context, log *slog.Logger) StoreAllocator {
	if a.binds == nil || a.cache == nil {
		return a
	}
	a.late = newLateBinds(a.binds, LateBindDelay, log.With("component", "dhcp"))
	cache := a.cache
	a.late.after = func() { cache.prefetch() }
	go func() {
		<-ctx.Done()
		a.late.wait()
	}()
	return a
}

// Flush writes the binds Defer let wait and returns once they are on disk.
func (a StoreAllocator) Flush() {
	if a.late != nil {
		a.late.wait()
	}
}

// bindLater acknowledges the bind of mac's CNI reservation ip at once,
// when the lease file (checked now, not from a possibly stale cache) says
// the reservation is mac's: it returns the lease as the write will leave
// it. ok is false when the bind must be written first (a dynamic lease,
// another MAC's address, a quarantined one).
func (a StoreAllocator) bindLater(mac string, ip netip.Addr, expires time.Time, hostname string) (leases.Lease, bool) {
	l, ok, err := a.cache.lookupFresh(mac)
	if err != nil || !ok || l.Source != leases.SourceCNI || l.IP != ip {
		return leases.Lease{}, false
	}
	a.late.add(&bindReq{mac: mac, ip: ip, expires: expires, hostname: hostname, done: make(chan struct{})})
	l.State, l.Expires = leases.StateBound, expires.UTC()
	if hostname != "" {
		l.Hostname = hostname
	}
	return l, true
}

// bindLater6 is bindLater for a DHCPv6 binding of mac's CNI reservation's
// ip6: the address is on disk, the write adds state6 and expires6. ok is
// false when the bind must be written first (quarantined, or the lease
// changed).
func (a StoreAllocator) bindLater6(mac string, ip6 netip.Addr, expires time.Time) (leases.Lease, bool) {
	l, ok, err := a.cache.lookupFresh(mac)
	if err != nil || !ok || l.Source != leases.SourceCNI || l.IP6 != ip6 || l.State6 == leases.StateDeclined {
		return leases.Lease{}, false
	}
	a.late.add(&bindReq{mac: mac, ip: ip6, expires: expires, v6: true, done: make(chan struct{})})
	l.State6, l.Expires6 = leases.StateBound, expires.UTC()
	return l, true
}

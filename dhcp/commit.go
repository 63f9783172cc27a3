package dhcp

import (
	"net/netip"
	"sync"
	"time"

	"github.com/vmlane/vmlane/leases"
)

// groupCommit batches binds into shared lease-store transactions, so a
// burst of guests asking at once costs one fsync per batch instead of one
// per guest, and every ACK still leaves only after its bind is on disk.
//
// There is no timer: the first bind to arrive while no transaction is
// running commits at once, alone; binds that arrive while it runs wait and
// go together in the next one. A lone guest pays nothing, and under load the
// batch grows with the time one fsync takes (the classic database group
// commit).
type groupCommit struct {
	store *leases.Store

	mu      sync.Mutex
	pending []*bindReq // waiting for the next transaction; guarded by mu
	running bool       // a goroutine is committing; guarded by mu

	// batched, when set, is told the size of every batch (tests, metrics).
	batched func(n int)
}

type bindReq struct {
	mac      string
	ip       netip.Addr
	expires  time.Time
	hostname string
	// v6: ip is the lease's IPv6 address, bound by DHCPv6 (Tx.Bind6).
	v6 bool

	lease leases.Lease
	err   error
	done  chan struct{}
}

// bind queues one bind and returns once it is durable, or failed. The
// caller whose bind finds no transaction running becomes the committer and
// keeps committing until the queue is empty; the others only wait.
func (g *groupCommit) bind(mac string, ip netip.Addr, expires time.Time, hostname string) (leases.Lease, error) {
	return g.queue(&bindReq{mac: mac, ip: ip, expires: expires, hostname: hostname, done: make(chan struct{})})
}

// bind6 is bind for a DHCPv6 binding of the lease's ip6.
func (g *groupCommit) bind6(mac string, ip6 netip.Addr, expires time.Time) (leases.Lease, error) {
	return g.queue(&bindReq{mac: mac, ip: ip6, expires: expires, v6: true, done: make(chan struct{})})
}

func (g *groupCommit) queue(r *bindReq) (leases.Lease, error) {
	g.mu.Lock()
	g.pending = append(g.pending, r)
	if g.running {
		g.mu.Unlock()
		<-r.done
		return r.lease, r.err
	}
	g.running = true
	for len(g.pending) > 0 {
		batch := g.pending
		g.pending = nil
		g.mu.Unlock()
		g.commit(batch)
		g.mu.Lock()
	}
	g.running = false
	g.mu.Unlock()
	return r.lease, r.err
}

// commit applies batch in one transaction. A bind that fails (the address
// is no longer the MAC's) fails alone: Tx.Bind checks before it changes
// anything, so the others still commit. A failed write fails them all.
func (g *groupCommit) commit(batch []*bindReq) {
	if g.batched != nil {
		g.batched(len(batch))
	}
	err := g.store.Update(func(tx *leases.Tx) error {
		for _, r := range batch {
			if r.v6 {
				r.lease, r.err = tx.Bind6(r.mac, r.ip, r.expires)
			} else {
				r.lease, r.err = tx.Bind(r.mac, r.ip, r.expires, r.hostname)
			}
		}
		return nil
	})
	for _, r := range batch {
		if err != nil {
			r.lease, r.err = leases.Lease{}, err
		}
		close(r.done)
	}
}

package main

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/vmlane/vmlane/internal/peer"
	"github.com/vmlane/vmlane/routes"
)

// A live migration's fast path. The target node hears the migrated guest on
// its bridge and updates the VM's claim; every other node moves the VM's
// routes when the API server's watch brings it the update: 10–30 ms on
// three nodes, most of a migration's loss beyond QEMU's downtime. So the
// target also says so to every other node at once, in a signed notice
// (internal/peer), and takes the VM here before its own update returns.
// A node that takes a notice uses the claim as the notice has it (its
// node and pod) in its claims passes, as though the update had come: the
// routes, the home node's table of VMs away, its NDP proxy. It stops as
// soon as its copy of the claim changes (the update came, or anything
// else did), and after peerHold at the latest; the claims are still what
// decides.

// peerHold is how long a node uses a notice whose claim's update has not
// come: far beyond the API path's 10–30 ms, so that a slow API server does
// not move the VM back and forth, and short enough that a target that
// heard its guest and then died (a failed migration, whose claim never
// moved) takes the VM's traffic for no longer. The target sends its notice
// again at every pass until its update is made.
const peerHold = 5 * time.Second

// peerSkew is how far a notice's time may be from the receiver's clock:
// nodes' clocks are kept by NTP within milliseconds of each other, and a
// replayed notice older than this is refused.
const peerSkew = 5 * time.Second

// peerMove is a claim as a notice (or this node, hearing the guest) has it
// ahead of its update: the VM runs in pod Pod on node Node, as of the
// claim's resourceVersion RV, until Until. A move that ran out stays,
// lapsed, until the claim changes: no notice of that version is taken
// again.
type peerMove struct {
	Node, Pod, RV string
	Until         time.Time
	lapsed        bool
}

// peerMoves is the moves a node knows ahead of their claims. The notices'
// reader adds; the claims passes read (overlay).
type peerMoves struct {
	mu    sync.Mutex
	moves map[string]peerMove // by VM
	// shown is the VMs the last overlay moved (pass goroutine only).
	shown map[string]peerMove
}

// add records a move of vm and reports whether it is news: a move of
// another version of the claim than the one it had replaces it; one of
// the same version keeps the first one's time (the hold counts from the
// first notice of a version, however many come) and is news only when it
// names another node or pod; one of a version whose move lapsed is not
// taken.
func (m *peerMoves) add(vm string, mv peerMove) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.moves == nil {
		m.moves = map[string]peerMove{}
	}
	old, had := m.moves[vm]
	if had && old.RV == mv.RV {
		if old.lapsed || (old.Node == mv.Node && old.Pod == mv.Pod) {
			return false
		}
		mv.Until = old.Until
	}
	m.moves[vm] = mv
	return true
}

// pending reports whether a move is in force or shown: the claims loop
// runs a pass at each poll while one is, so that one that runs out is
// undone in time.
func (m *peerMoves) pending() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.shown) > 0 {
		return true
	}
	for _, mv := range m.moves {
		if !mv.lapsed {
			return true
		}
	}
	return false
}

// showing reports whether the last overlay showed a move.
func (m *peerMoves) showing() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.shown) > 0
}

// overlay is have (sorted by VM, as list returns it) with each known move
// in place of its claim, while the claim is at the move's resourceVersion
// and the move's time has not run out; have itself is not changed. A move
// that was shown and whose claim changed since is forgotten: the claim has
// its update, or another change, which wins. A move whose claim is at
// another version and never was shown waits, for a receiver whose watch
// is behind the sender's. A move that ran out lapses, and is forgotten
// once its claim is at another version. stale is called with each VM
// whose claim overlay shows otherwise than the last call did, and lapsed
// with each move that was shown and ran out before its claim changed: a
// target that heard its guest and could not update the claim in time, or
// a notice the claim never followed.
func (m *peerMoves) overlay(have []claim, now time.Time, stale func(vm string), lapsed func(vm string, mv peerMove)) []claim {
	m.mu.Lock()
	defer m.mu.Unlock()
	shown := map[string]peerMove{}
	var out []claim
	for vm, mv := range m.moves {
		i, found := claimAt(have, vm)
		atRV := found && have[i].ResourceVersion == mv.RV
		_, was := m.shown[vm]
		switch {
		case mv.lapsed || (!atRV && was) || (!atRV && !now.Before(mv.Until)):
			if !atRV {
				delete(m.moves, vm) // the claim changed: it decides again
			}
			continue
		case !now.Before(mv.Until):
			mv.lapsed = true
			m.moves[vm] = mv
			if was {
				lapsed(vm, mv)
			}
			continue
		case !atRV:
			continue // the watch may be behind the notice
		}
		c := have[i]
		if c.Status.Node == mv.Node && c.Status.Pod == mv.Pod && c.Status.HeldUntil == "" {
			continue // the claim says so already
		}
		if out == nil {
			out = slices.Clone(have)
		}
		c.Status.Node, c.Status.Pod, c.Status.HeldUntil = mv.Node, mv.Pod, ""
		out[i] = c
		shown[vm] = mv
	}
	for vm, mv := range shown {
		if old, was := m.shown[vm]; !was || old != mv {
			stale(vm)
		}
	}
	for vm := range m.shown {
		if _, still := shown[vm]; !still {
			stale(vm)
		}
	}
	m.shown = shown
	if out == nil {
		return have
	}
	return out
}

// noticeFrom says why a node (self, its Nodes as node looks them up) does
// not take notice n, which came from address src at now: nil if it does.
// It takes a notice from another node that is in the cluster and Ready,
// sent from one of that Node's addresses, within peerSkew of now. Whether
// the claim is at the notice's version is the claims pass's to see
// (peerMoves.overlay).
func noticeFrom(n peer.Notice, src netip.Addr, self string, node func(string) (routes.Node, bool), now time.Time) error {
	if n.From == self {
		return fmt.Errorf("notice of VM %s from this node's own name", n.VM)
	}
	from, ok := node(n.From)
	switch {
	case !ok:
		return fmt.Errorf("notice of VM %s from node %s, which is not in the cluster", n.VM, n.From)
	case !from.Ready:
		return fmt.Errorf("notice of VM %s from node %s, which is not Ready", n.VM, n.From)
	case !slices.Contains(from.Addrs, src.Unmap()):
		return fmt.Errorf("notice of VM %s from node %s sent from %s, not an address of that Node", n.VM, n.From, src)
	}
	switch d := now.Sub(n.SentAt()); {
	case d > peerSkew:
		return fmt.Errorf("notice of VM %s from node %s sent %v ago by this node's clock: at most %v", n.VM, n.From, d, peerSkew)
	case d < -peerSkew:
		return fmt.Errorf("notice of VM %s from node %s sent %v ahead of this node's clock: at most %v", n.VM, n.From, -d, peerSkew)
	}
	return nil
}

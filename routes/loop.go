package routes

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"reflect"
	"sync"
	"time"
)

// Loop keeps the kernel in the desired state: it reconciles when told that
// the desired state changed (Trigger), when the kernel lost an owned route,
// and on a resync timer, because the kernel and other daemons change things
// behind vmlane's back. Only one reconcile runs at a time; triggers that
// arrive during one collapse into one more.
type Loop struct {
	Table routeTable
	// IPT4 and IPT6 keep the chains of each family's NATOptions; either
	// may be nil (no iptables for that family).
	IPT4, IPT6 iptablesInterface
	Proto      int
	Resync     time.Duration
	// Desired returns the current desired state: its Routes, and the NAT
	// exemption of each family (Desired.NAT), which the chains are
	// rendered from. It is called for every reconcile.
	Desired func() Desired
	// Observe, if set, receives every outcome and error.
	Observe func(Outcome, error)
	// After, if set, runs at the end of every reconcile with the desired
	// NAT exemptions and full as for the chains, and its error joins the
	// reconcile's: state a backend keeps besides routes and iptables
	// (macOS's pf anchor and forwarding sysctls, see NewAnchorController).
	After func(nat []NATOptions, full bool) error
	// Tunnel, if set, carries the routes whose next hop is not directly
	// reachable (--cross-subnet=vxlan). Its failures (the device cannot
	// be made, an FDB entry is refused) are the outcome's TunnelErr, not
	// the reconcile's error: the direct routes are whole, and the node
	// stays healthy while the operator fixes what the Event says.
	Tunnel Tunnel
	// Fabric routes host routes whose next hop is not directly reachable
	// via the fabric (OffLink.Fabric; --cross-subnet=bgp).
	Fabric bool
	Log    *slog.Logger

	trigger chan struct{}
	applied [2][]Chain // per family (familyIndex), the chains last applied without error
	// mu keeps a reconcile, an Apply and a Between from running at once.
	mu sync.Mutex
}

// ownedReplacer is a routeTable that replaces one route unless the kernel
// routes exactly its destination by another protocol (netlinkTable).
type ownedReplacer interface {
	ReplaceOwned(dst netip.Prefix, via netip.Addr, proto int) error
}

// errForeign is ReplaceOwned's refusal.
var errForeign = errors.New("routed by another owner")

// Apply is the fast path of a change whose every route the caller knows (a
// VM's host route, when its VMClaim moved): it replaces replace and
// deletes del at once, between reconciles. A route the kernel refuses (a
// next hop that is not directly reachable, which the tunnel or the fabric
// carries) or that another owner holds is not changed: the caller leaves
// it to a reconcile. It does nothing on a table that cannot tell another
// owner's route (ownedReplacer), and reports how many routes it changed.
func (l *Loop) Apply(replace []Route, del []KernelRoute) int {
	t, ok := l.Table.(ownedReplacer)
	if !ok {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range replace {
		if err := t.ReplaceOwned(r.Dst, r.Via, l.Proto); err != nil {
			l.Log.Debug("route left to the reconcile", "route", r.String(), "err", err)
			continue
		}
		n++
		l.Log.Debug("route installed ahead of the reconcile", "route", r.String(), "node", r.Node)
	}
	for _, r := range del {
		r.Proto = l.Proto
		if err := l.Table.Delete(r); err != nil {
			l.Log.Debug("route deletion left to the reconcile", "route", r.String(), "err", err)
			continue
		}
		n++
	}
	return n
}

// familyIndex is an address family's index into per-family state: 0 for
// IPv4, 1 for IPv6.
func familyIndex(p netip.Prefix) int {
	if p.Addr().Is4() {
		return 0
	}
	return 1
}

// Between runs fn while no reconcile runs: what fn changes beside the
// routes (an announcement) is then never overtaken by a reconcile that
// read the state before it.
func (l *Loop) Between(fn func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fn()
}

// Trigger asks for a reconcile soon. It never blocks.
func (l *Loop) Trigger() {
	select {
	case l.trigger <- struct{}{}:
	default:
	}
}

// Init prepares the loop; call it before Trigger is used from other
// goroutines and before Run.
func (l *Loop) Init() {
	if l.trigger == nil {
		l.trigger = make(chan struct{}, 1)
	}
	if l.Log == nil {
		l.Log = slog.New(slog.DiscardHandler)
	}
}

// Run reconciles until ctx ends, starting with one reconcile at once.
func (l *Loop) Run(ctx context.Context) {
	l.Init()
	tick := time.NewTicker(l.Resync)
	defer tick.Stop()
	full := true // the first pass checks everything
	for {
		l.reconcile(full)
		select {
		case <-ctx.Done():
			return
		case <-l.trigger:
			full = false
		case <-tick.C:
			full = true
		}
	}
}

// Once reconciles routes and chains one time, checking the chains in the
// kernel whatever it last applied.
func (l *Loop) Once() (Outcome, error) { return l.reconcile(true) }

// reconcile reconciles routes, and the iptables chains either fully (full:
// read back and repaired, on the resync tick) or only when the rendered
// chains differ from what was last applied. A route event or a Node event
// then costs no iptables exec unless the rules must change: checking a
// chain takes tens of milliseconds of execs, which every event queued
// behind it would wait for.
func (l *Loop) reconcile(full bool) (Outcome, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	start := time.Now()
	d := l.Desired()
	dev, terr := "", error(nil)
	if l.Tunnel != nil {
		if terr = l.Tunnel.Ensure(); terr == nil {
			dev = l.Tunnel.Device()
		}
	}
	out, err := ReconcileOffLink(l.Table, d.Routes, l.Proto, OffLink{Tunnel: dev, Fabric: l.Fabric})
	if dev != "" {
		var peers []TunnelPeer
		peers, out.TunnelSkips = TunnelPeers(out.Tunneled, d.Addrs, l.Tunnel.Local())
		terr = l.Tunnel.Sync(peers, TunnelSources(d.Addrs, l.Tunnel.Local()))
	}
	out.TunnelErr = terr
	if terr != nil {
		l.Log.Error("VXLAN tunnel", "err", terr)
	}
	for _, o := range d.NAT {
		i := o.family()
		ipt := [2]iptablesInterface{l.IPT4, l.IPT6}[i]
		if ipt == nil {
			continue
		}
		chains := Chains(o)
		if !full && reflect.DeepEqual(l.applied[i], chains) {
			continue
		}
		changed, cerr := EnsureChains(ipt, chains)
		if changed {
			l.Log.Info("rebuilt iptables chains", "podCIDR", o.PodCIDR, "services", o.Services)
		}
		if cerr == nil {
			l.applied[i] = chains
		} else {
			l.applied[i] = nil
		}
		err = errors.Join(err, cerr)
	}
	if l.After != nil {
		err = errors.Join(err, l.After(d.NAT, full))
	}
	out.Duration = time.Since(start)
	for _, r := range out.Installed {
		l.Log.Debug("route installed", "route", r.String(), "node", r.Node)
	}
	for _, r := range out.Deleted {
		l.Log.Info("stale route deleted", "route", r.String())
	}
	if err != nil {
		l.Log.Error("reconcile", "err", err)
	}
	if l.Observe != nil {
		l.Observe(out, err)
	}
	return out, err
}

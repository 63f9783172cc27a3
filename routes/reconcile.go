package routes

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"syscall"
	"time"
)

// DefaultProtocol is the route protocol number vmlane marks its routes with
// (the "proto" of `ip route`). 0–4 belong to the kernel, 8–18 and 42 and up
// to routing daemons registered in iproute2's rt_protos (bird 12, zebra 11,
// babel 42, bgp 186, isis 187, ospf 188, rip 189, eigrp 192); 77 is unnamed
// and used by no common daemon.
const DefaultProtocol = 77

// KernelRoute is a route as the kernel has it.
type KernelRoute struct {
	Dst   netip.Prefix
	Via   netip.Addr // zero for a route without a gateway
	Dev   string
	Proto int
}

// String prints the route as `ip route` does.
func (r KernelRoute) String() string {
	s := r.Dst.String()
	if r.Dst.Bits() == 0 {
		s = "default"
	}
	if r.Via.IsValid() {
		s += " via " + r.Via.String()
	}
	if r.Dev != "" {
		s += " dev " + r.Dev
	}
	return s + fmt.Sprintf(" proto %d", r.Proto)
}

// routeTable is the kernel's main routing table, shaped like the netlink
// calls it wraps (RouteListFiltered, RouteReplace, RouteDel, RouteGet).
type routeTable interface {
	// List returns the main table's unicast routes of both families.
	List() ([]KernelRoute, error)
	// Replace installs dst via via with protocol proto (ip route replace).
	Replace(dst netip.Prefix, via netip.Addr, proto int) error
	// Delete removes exactly r.
	Delete(r KernelRoute) error
	// Get returns the gateway of the kernel's route to ip (ip route get),
	// zero when ip is directly reachable.
	Get(ip netip.Addr) (netip.Addr, error)
}

// Outcome is what one reconcile did and saw.
type Outcome struct {
	// Installed are the routes added or changed; Deleted the owned routes
	// removed because nothing wants them any more.
	Installed []Route
	Deleted   []KernelRoute
	// Unreachable are desired routes whose next hop is not directly
	// reachable (the kernel's route to it has a gateway).
	Unreachable []Route
	// Foreign are desired routes for which another owner already has a
	// route to the same destination; vmlane leaves those alone.
	Foreign []KernelRoute
	// Overlaps are desired routes that overlap a route of another owner
	// without having its destination (one contains the other): both are
	// kept, and the longer prefix wins for the addresses both cover.
	Overlaps []Overlap
	// Tunneled are the desired routes that go through the tunnel after
	// the reconcile (installed now or kept), each with its Dev; with a
	// tunnel, routes whose next hop is not directly reachable go there
	// instead of to Unreachable.
	Tunneled []Route
	// ViaFabric are the host routes routed via the fabric's gateway
	// (OffLink.Fabric), installed now or kept, with that gateway as Via.
	ViaFabric []Route
	// TunnelSkips are tunnel routes whose peer could not be programmed
	// (TunnelPeers), and TunnelErr what went wrong with the device.
	TunnelSkips []Skip
	TunnelErr   error
	// Owned is the number of owned routes after the reconcile.
	Owned int
	// Duration is how long the reconcile took (set by Loop).
	Duration time.Duration
}

// Overlap is a desired route and a route of another owner whose
// destinations overlap.
type Overlap struct {
	Route Route
	Other KernelRoute
}

// Reconcile drives the table to want: routes with protocol proto and no
// other. Routes of other protocols are never changed or deleted; a foreign
// route to a desired destination is reported in Outcome.Foreign instead of
// overwritten. It adds and replaces before it deletes, and returns every
// error joined, having done all it could.
func Reconcile(t routeTable, want []Route, proto int) (Outcome, error) {
	return ReconcileTunnel(t, want, proto, "")
}

// ReconcileTunnel is Reconcile with a tunnel device (empty: none): a
// desired route whose next hop is not directly reachable goes through the
// device instead (Dst via Via dev tunnel onlink), and a route through it
// whose next hop has become directly reachable is replaced by the direct
// route. Reachability is the kernel's judgement (ip route get), asked of
// every tunnel route at every reconcile, so a peer that moves onto or off
// a connected subnet changes path at the next resync at the latest.
func ReconcileTunnel(t routeTable, want []Route, proto int, tunnel string) (Outcome, error) {
	return ReconcileOffLink(t, want, proto, OffLink{Tunnel: tunnel})
}

// OffLink says what a reconcile does with a desired route whose next hop is
// not directly reachable; the zero value reports it (Outcome.Unreachable).
type OffLink struct {
	// Tunnel is the tunnel device that carries such routes
	// (--cross-subnet=vxlan; see ReconcileTunnel).
	Tunnel string
	// Fabric routes such a host route (a VM away from home) via the
	// gateway the kernel uses toward the VM's node (--cross-subnet=bgp):
	// the fabric has the address from that node's announcement, more
	// specific than the pod subnet that holds it, which this node and
	// its neighbours would otherwise route on-link or to the home node.
	// Pod subnet routes need nothing: the node's default route leads to
	// the fabric.
	Fabric bool
}

// ReconcileOffLink is Reconcile with o for the routes whose next hop is
// not directly reachable.
func ReconcileOffLink(t routeTable, want []Route, proto int, o OffLink) (Outcome, error) {
	var out Outcome
	tunnel := o.Tunnel
	onLink, _ := t.(onLinkReplacer)
	if onLink == nil {
		tunnel = ""
	}
	actual, err := t.List()
	if err != nil {
		return out, fmt.Errorf("listing routes: %w", err)
	}
	owned, foreign, wide := byOwner(actual, proto)
	var errs []error
	wanted := map[netip.Prefix]bool{}
	var replace []Route
	for _, r := range want {
		if f, ok := foreign[r.Dst]; ok {
			out.Foreign = append(out.Foreign, f)
			continue
		}
		for _, f := range wide {
			// A VM's host route is meant to win over the subnet that
			// holds it (its home node's bridge subnet, there).
			if r.Dst.Bits() < r.Dst.Addr().BitLen() && f.Dst.Overlaps(r.Dst) {
				out.Overlaps = append(out.Overlaps, Overlap{Route: r, Other: f})
			}
		}
		if have, ok := owned[r.Dst]; ok {
			if have.Via == r.Via && (tunnel == "" || have.Dev != tunnel) {
				wanted[r.Dst] = true
				continue
			}
			if tunnel != "" && have.Dev == tunnel && have.Via == r.TunnelVia && offLink(t, r.Via) {
				wanted[r.Dst] = true
				out.Tunneled = append(out.Tunneled, r.throughTunnel(tunnel))
				continue
			}
			if o.Fabric && isHostRoute(r.Dst) && have.Via != r.Via {
				if gw, ok := gatewayTo(t, r.Via); ok && have.Via == gw {
					wanted[r.Dst] = true
					r.Via = gw
					out.ViaFabric = append(out.ViaFabric, r)
					continue
				}
			}
			// Otherwise (a new next hop, or on-link now) the direct
			// route is tried first.
		}
		replace = append(replace, r)
	}
	// The kernel refuses a gateway that is not on a connected subnet, so
	// a route is looked up (ip route get) only when its replace fails: a
	// full sync of 5,000 routes then costs 5,000 route requests, not
	// 10,000, and the kernel table sends them pipelined (batchReplacer).
	for i, err := range replaceAll(t, replace, proto) {
		r := replace[i]
		if err != nil {
			// Unreachable: the route to the next hop has a gateway, or
			// there is no route to it at all (a node with no default
			// route). Either is the cluster's layout, not a failure of
			// this reconcile, which must not keep failing (and the
			// health check with it) over one badly placed node.
			if gw, off := reach(t, r.Via); off {
				if gw.IsValid() && o.Fabric && isHostRoute(r.Dst) {
					r.Via = gw
					wanted[r.Dst] = true
					if err := t.Replace(r.Dst, gw, proto); err != nil {
						errs = append(errs, fmt.Errorf("adding route %s via the fabric: %w", r, err))
						continue
					}
					out.Installed = append(out.Installed, r)
					out.ViaFabric = append(out.ViaFabric, r)
					continue
				}
				if tunnel == "" || !r.TunnelVia.IsValid() {
					out.Unreachable = append(out.Unreachable, r)
					continue
				}
				r = r.throughTunnel(tunnel)
				if err := onLink.ReplaceOnLink(r.Dst, r.Via, tunnel, proto); err != nil {
					wanted[r.Dst] = true
					errs = append(errs, fmt.Errorf("adding route %s: %w", r, err))
					continue
				}
				wanted[r.Dst] = true
				out.Installed = append(out.Installed, r)
				out.Tunneled = append(out.Tunneled, r)
				continue
			}
			wanted[r.Dst] = true // keep an old owned route rather than delete it
			errs = append(errs, fmt.Errorf("adding route %s via %s: %w", r.Dst, r.Via, err))
			continue
		}
		wanted[r.Dst] = true
		out.Installed = append(out.Installed, r)
	}
	for _, r := range sortedRoutes(owned) {
		if wanted[r.Dst] {
			continue
		}
		if err := t.Delete(r); err != nil {
			errs = append(errs, fmt.Errorf("deleting route %s: %w", r, err))
			continue
		}
		out.Deleted = append(out.Deleted, r)
	}
	out.Owned = len(owned) + len(out.Installed) - len(out.Deleted)
	for _, r := range out.Installed {
		if _, replaced := owned[r.Dst]; replaced {
			out.Owned--
		}
	}
	return out, errors.Join(errs...)
}

// byOwner splits the kernel's routes into those with protocol proto
// (owned) and the others (foreign, the first route of each destination),
// by destination; wide are the foreign routes that could overlap a pod
// subnet, in the kernel's order.
func byOwner(actual []KernelRoute, proto int) (owned, foreign map[netip.Prefix]KernelRoute, wide []KernelRoute) {
	owned, foreign = map[netip.Prefix]KernelRoute{}, map[netip.Prefix]KernelRoute{}
	for _, r := range actual {
		if r.Proto == proto {
			owned[r.Dst] = r
		} else if _, seen := foreign[r.Dst]; !seen {
			foreign[r.Dst] = r
			// Not the default route, nor a host route (a proxy's or a
			// peer's /32): those overlap everything or nothing worth
			// saying.
			if r.Dst.Bits() > 0 && r.Dst.Bits() < r.Dst.Addr().BitLen() {
				wide = append(wide, r)
			}
		}
	}
	return owned, foreign, wide
}

// throughTunnel is r as it goes through the tunnel device dev: via its
// TunnelVia, on-link.
func (r Route) throughTunnel(dev string) Route {
	r.Via, r.Dev = r.TunnelVia, dev
	return r
}

// gatewayTo is the gateway of the kernel's route to via, if it has one.
func gatewayTo(t routeTable, via netip.Addr) (netip.Addr, bool) {
	gw, _ := reach(t, via)
	return gw, gw.IsValid()
}

func isHostRoute(p netip.Prefix) bool { return p.Bits() == p.Addr().BitLen() }

// offLink reports whether via is not directly reachable: the kernel's
// route to it has a gateway, or there is none.
func offLink(t routeTable, via netip.Addr) bool {
	_, off := reach(t, via)
	return off
}

// reach asks the kernel once how it reaches via (ip route get): through
// gw (zero when it has no gateway), and whether that is off-link (a
// gateway, or no route at all).
func reach(t routeTable, via netip.Addr) (gw netip.Addr, off bool) {
	gw, err := t.Get(via)
	if err != nil {
		return netip.Addr{}, errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EHOSTUNREACH)
	}
	return gw, gw.IsValid()
}

// batchReplacer is a routeTable that replaces many routes at once (the
// kernel table pipelines its netlink requests); errs[i] is rs[i]'s.
type batchReplacer interface {
	ReplaceAll(rs []Route, proto int) (errs []error)
}

// replaceAll replaces rs through t's batch when it has one, else one by
// one, and returns each route's error.
func replaceAll(t routeTable, rs []Route, proto int) []error {
	if b, ok := t.(batchReplacer); ok {
		return b.ReplaceAll(rs, proto)
	}
	return replaceEach(t, rs, proto)
}

// replaceEach replaces rs one by one.
func replaceEach(t routeTable, rs []Route, proto int) []error {
	errs := make([]error, len(rs))
	for i, r := range rs {
		errs[i] = t.Replace(r.Dst, r.Via, proto)
	}
	return errs
}

func sortedRoutes(m map[netip.Prefix]KernelRoute) []KernelRoute {
	out := make([]KernelRoute, 0, len(m))
	for _, r := range m {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b KernelRoute) int { return comparePrefix(a.Dst, b.Dst) })
	return out
}

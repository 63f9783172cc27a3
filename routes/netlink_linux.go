package routes

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/vmlane/vmlane/internal/netaddr"
)

// netlinkTable is the kernel's main table through one netlink handle (a
// socket kept open: the package-level calls open one per call, which costs
// a third of a 5,000-route sync). Dumps go through netlinksafe, which
// retries netlink.ErrDumpInterrupted.
type netlinkTable struct {
	h     netlinksafe.Handle
	batch *routeBatch // nil: replaces go one by one
}

// NewKernelTable returns the main routing table of the netns the calling
// thread is in now: the handle's socket stays in that netns whichever
// thread uses it later.
func NewKernelTable() routeTable {
	h, err := netlinksafe.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		// A handle without sockets opens one per call, as the
		// package-level functions do.
		return netlinkTable{h: netlinksafe.Handle{Handle: &netlink.Handle{}}}
	}
	b, err := newRouteBatch()
	if err != nil {
		b = nil
	}
	return netlinkTable{h: h, batch: b}
}

func (t netlinkTable) List() ([]KernelRoute, error) {
	var out []KernelRoute
	names := map[int]string{}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := t.h.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN, Type: unix.RTN_UNICAST}, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_TYPE)
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			kr := KernelRoute{Dst: netaddr.Prefix(r.Dst), Proto: int(r.Protocol)}
			if !kr.Dst.IsValid() { // the default route
				if fam == netlink.FAMILY_V4 {
					kr.Dst = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
				} else {
					kr.Dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
				}
			}
			if gw, ok := netip.AddrFromSlice(r.Gw); ok {
				kr.Via = gw.Unmap()
			}
			if r.LinkIndex > 0 {
				if _, ok := names[r.LinkIndex]; !ok {
					if l, err := t.h.LinkByIndex(r.LinkIndex); err == nil {
						names[r.LinkIndex] = l.Attrs().Name
					}
				}
				kr.Dev = names[r.LinkIndex]
			}
			out = append(out, kr)
		}
	}
	return out, nil
}

func (t netlinkTable) Replace(dst netip.Prefix, via netip.Addr, proto int) error {
	return t.h.RouteReplace(&netlink.Route{
		Dst:      netaddr.IPNet(dst),
		Gw:       via.AsSlice(),
		Protocol: netlink.RouteProtocol(proto),
		Table:    unix.RT_TABLE_MAIN,
	})
}

// ReplaceOwned is Replace of one route, unless the kernel has a route to
// exactly dst of another protocol (the CNI plugin's host route, another
// daemon's), which it leaves alone as a reconcile does (foreign): it asks
// the kernel for the route that matches dst (ip route get fibmatch), not
// for the whole table.
func (t netlinkTable) ReplaceOwned(dst netip.Prefix, via netip.Addr, proto int) error {
	rs, err := t.h.RouteGetWithOptions(dst.Addr().AsSlice(), &netlink.RouteGetOptions{FIBMatch: true})
	if err == nil && len(rs) > 0 && rs[0].Dst != nil && netaddr.Prefix(rs[0].Dst) == dst && int(rs[0].Protocol) != proto {
		return fmt.Errorf("%w: %s is routed by protocol %d", errForeign, dst, rs[0].Protocol)
	}
	return t.Replace(dst, via, proto)
}

// ReplaceAll is Replace of every route of rs, pipelined (routeBatch).
func (t netlinkTable) ReplaceAll(rs []Route, proto int) []error {
	if t.batch == nil {
		return replaceEach(t, rs, proto)
	}
	return t.batch.replaceAll(rs, proto)
}

func (t netlinkTable) Delete(r KernelRoute) error {
	nr := &netlink.Route{Dst: netaddr.IPNet(r.Dst), Protocol: netlink.RouteProtocol(r.Proto), Table: unix.RT_TABLE_MAIN}
	if r.Via.IsValid() {
		nr.Gw = r.Via.AsSlice()
	}
	err := t.h.RouteDel(nr)
	if errors.Is(err, syscall.ESRCH) { // already gone
		return nil
	}
	return err
}

func (t netlinkTable) Get(ip netip.Addr) (netip.Addr, error) {
	rs, err := t.h.RouteGet(ip.AsSlice())
	if err != nil {
		return netip.Addr{}, fmt.Errorf("ip route get %s: %w", ip, err)
	}
	for _, r := range rs {
		if gw, ok := netip.AddrFromSlice(r.Gw); ok && !gw.IsUnspecified() {
			return gw.Unmap(), nil
		}
	}
	return netip.Addr{}, nil
}

// routeEventBuffer is the receive buffer of WatchDeletes' socket. Every
// route change of the netns lands there, not only deletes: vmlane's own
// sync of 5,000 routes while the daemon decodes the Node list overflowed
// the default buffer (about 200 KiB, a few hundred events).
var routeEventBuffer = 8 << 20

// WatchDeletes calls fn whenever a route with protocol proto is deleted (by
// hand, by another daemon, by a link going down), so the controller can
// restore it at once rather than at the next resync. It stops when done is
// closed.
//
// A socket that overflows anyway (ENOBUFS) has lost events, and the
// netlink library ends the subscription on any receive error: WatchDeletes
// then calls fn, since a delete may be among the lost, and subscribes
// again.
//
// It watches the netns of the calling thread, whichever thread subscribes
// again later.
func WatchDeletes(proto int, done <-chan struct{}, fn func()) error {
	ns, err := netns.Get()
	if err != nil {
		return fmt.Errorf("subscribing to route events: %w", err)
	}
	stop := make(chan struct{})
	ch, err := subscribeRoutes(ns, stop)
	if err != nil {
		ns.Close()
		return fmt.Errorf("subscribing to route events: %w", err)
	}
	go func() {
		defer ns.Close()
		for {
			// The library closes a subscription's socket only when its
			// done channel closes: stop is closed when the daemon stops
			// or the subscription has ended, so an overflowed socket
			// does not stay open holding its buffer.
			ended := make(chan struct{})
			go func(stop chan struct{}) {
				select {
				case <-done:
				case <-ended:
				}
				close(stop)
			}(stop)
			for u := range ch {
				if u.Type == unix.RTM_DELROUTE && int(u.Protocol) == proto {
					fn()
				}
			}
			close(ended)
			select {
			case <-done:
				return
			default:
			}
			fn()
			for {
				stop = make(chan struct{})
				if ch, err = subscribeRoutes(ns, stop); err == nil {
					break
				}
				select {
				case <-done:
					return
				case <-time.After(time.Second):
				}
			}
		}
	}()
	return nil
}

// subscribeRoutes subscribes to the route events of ns, until stop is
// closed, with a socket of routeEventBuffer bytes, forced past
// net.core.rmem_max (CAP_NET_ADMIN, which a daemon that installs routes
// has).
func subscribeRoutes(ns netns.NsHandle, stop <-chan struct{}) (chan netlink.RouteUpdate, error) {
	ch := make(chan netlink.RouteUpdate, 64)
	err := netlink.RouteSubscribeWithOptions(ch, stop, netlink.RouteSubscribeOptions{
		Namespace: &ns, ReceiveBufferSize: routeEventBuffer, ReceiveBufferForceSize: true})
	return ch, err
}

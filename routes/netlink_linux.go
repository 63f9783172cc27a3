package routes

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
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

// WatchDeletes calls fn whenever a route with protocol proto is deleted (by
// hand, by another daemon, by a link going down), so the controller can
// restore it at once rather than at the next resync. It stops when done is
// closed.
func WatchDeletes(proto int, done <-chan struct{}, fn func()) error {
	ch := make(chan netlink.RouteUpdate, 64)
	if err := netlink.RouteSubscribe(ch, done); err != nil {
		return fmt.Errorf("subscribing to route events: %w", err)
	}
	go func() {
		for u := range ch {
			if u.Type == unix.RTM_DELROUTE && int(u.Protocol) == proto {
				fn()
			}
		}
	}()
	return nil
}

package routes

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/net/route"
	"golang.org/x/sys/unix"

	"github.com/vmlane/vmlane/internal/command"
)

// darwinKernel is macOS's routing table: dumps through the PF_ROUTE
// sysctl, changes through route(8).
type darwinKernel struct{ command.Exec }

// NewBSDTable returns macOS's main routing table as vmlane's route table,
// with the set of routes vmlane owns kept in the state file at statePath
// (DefaultBSDStatePath). proto is the number List marks owned routes with
// (the daemon's --route-protocol): BSD routes have no protocol field.
// An unreadable state file comes back as an error with a table that owns
// nothing.
func NewBSDTable(statePath string, proto int) (routeTable, error) {
	return newBSDTable(darwinKernel{}, statePath, proto)
}

// skipFlags are the kernel's own entries, never a pod subnet route: ARP
// and NDP entries (LLINFO), hosts cloned from a network route (WASCLONED),
// and interface-scoped duplicates (IFSCOPE), which only traffic bound to
// that interface uses; vmlane's routes are unscoped.
const skipFlags = unix.RTF_LLINFO | unix.RTF_WASCLONED | unix.RTF_IFSCOPE

// Dump reads the table with the NET_RT_DUMP sysctl: one system call
// for the whole table, where netstat -rn would be a process and a text
// format to parse. A table that keeps growing while it is read (ENOMEM)
// is asked for again (fetchRetry), and a parser panic is an error
// (safeParse): either costs one reconcile, never the daemon.
func (darwinKernel) Dump() ([]KernelRoute, error) {
	rib, err := fetchRetry(func() ([]byte, error) {
		return route.FetchRIB(syscall.AF_UNSPEC, route.RIBTypeRoute, 0)
	}, time.Sleep)
	if err != nil {
		return nil, err
	}
	msgs, err := safeParse(func() ([]route.Message, error) { return route.ParseRIB(route.RIBTypeRoute, rib) })
	if err != nil {
		return nil, err
	}
	names := map[int]string{}
	var out []KernelRoute
	for _, m := range msgs {
		rm, ok := m.(*route.RouteMessage)
		if !ok || rm.Flags&unix.RTF_UP == 0 || rm.Flags&skipFlags != 0 {
			continue
		}
		kr, ok := fromRouteMessage(rm)
		if !ok {
			continue
		}
		if rm.Index > 0 {
			if _, seen := names[rm.Index]; !seen {
				if ifc, err := net.InterfaceByIndex(rm.Index); err == nil {
					names[rm.Index] = ifc.Name
				}
			}
			kr.Dev = names[rm.Index]
		}
		out = append(out, kr)
	}
	return out, nil
}

func addrOf(a route.Addr) (netip.Addr, bool) {
	switch a := a.(type) {
	case *route.Inet4Addr:
		return netip.AddrFrom4(a.IP), true
	case *route.Inet6Addr:
		return netip.AddrFrom16(a.IP), true
	}
	return netip.Addr{}, false
}

// fromRouteMessage reads destination, mask and gateway. A host route
// (RTF_HOST) has no mask; a network route's mask may come shortened,
// which x/net/route already expands.
func fromRouteMessage(rm *route.RouteMessage) (KernelRoute, bool) {
	if len(rm.Addrs) <= unix.RTAX_DST {
		return KernelRoute{}, false
	}
	dst, ok := addrOf(rm.Addrs[unix.RTAX_DST])
	if !ok {
		return KernelRoute{}, false
	}
	bits := dst.BitLen()
	if rm.Flags&unix.RTF_HOST == 0 {
		var mask netip.Addr
		if len(rm.Addrs) > unix.RTAX_NETMASK && rm.Addrs[unix.RTAX_NETMASK] != nil {
			mask, _ = addrOf(rm.Addrs[unix.RTAX_NETMASK])
		}
		switch {
		case mask.IsValid():
			ones, _ := net.IPMask(mask.AsSlice()).Size()
			bits = ones
		case dst.IsUnspecified():
			bits = 0
		}
	}
	kr := KernelRoute{Dst: netip.PrefixFrom(dst, bits).Masked()}
	if rm.Flags&unix.RTF_GATEWAY != 0 && len(rm.Addrs) > unix.RTAX_GATEWAY {
		if gw, ok := addrOf(rm.Addrs[unix.RTAX_GATEWAY]); ok {
			kr.Via = gw
		}
	}
	return kr, true
}

// WatchDeletes calls fn whenever a static gateway route is deleted (by
// hand, by another daemon, by an interface going away), so the controller
// restores vmlane's at once rather than at the next resync. BSD routes
// carry no protocol, so proto is unused and every such delete triggers a
// reconcile, which costs one table dump when nothing of vmlane's was hit.
// It stops when done is closed.
func WatchDeletes(_ int, done <-chan struct{}, fn func()) error {
	fd, err := unix.Socket(unix.AF_ROUTE, unix.SOCK_RAW, unix.AF_UNSPEC)
	if err != nil {
		return fmt.Errorf("opening a routing socket: %w", err)
	}
	go func() {
		<-done
		unix.Close(fd) // ends the blocking read below
	}()
	go func() {
		buf := make([]byte, 1<<16)
		for {
			n, err := unix.Read(fd, buf)
			if err != nil {
				if errors.Is(err, unix.EINTR) {
					continue
				}
				return
			}
			msgs, err := safeParse(func() ([]route.Message, error) { return route.ParseRIB(route.RIBTypeRoute, buf[:n]) })
			if err != nil {
				// A message the parser cannot read (or panics on) may
				// be a delete of vmlane's: reconcile once to be sure.
				fn()
				continue
			}
			for _, m := range msgs {
				rm, ok := m.(*route.RouteMessage)
				if ok && rm.Type == unix.RTM_DELETE && rm.Flags&unix.RTF_GATEWAY != 0 && rm.Flags&unix.RTF_STATIC != 0 {
					fn()
				}
			}
		}
	}()
	return nil
}

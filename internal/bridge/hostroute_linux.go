package bridge

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

func hostRoute(index int, dst netip.Prefix) *netlink.Route {
	return &netlink.Route{
		LinkIndex: index,
		Dst:       netaddr.IPNet(dst),
		Scope:     netlink.SCOPE_LINK,
		Protocol:  netlink.RouteProtocol(HostRouteProtocol),
		Table:     unix.RT_TABLE_MAIN,
	}
}

// RouteHost routes dst onto the bridge (replacing any route to dst).
func RouteHost(name string, dst netip.Prefix) error {
	br, err := netlinksafe.LinkByName(name)
	if err != nil {
		return fmt.Errorf("looking up %s: %w", name, err)
	}
	return netlink.RouteReplace(hostRoute(br.Attrs().Index, dst))
}

// UnrouteHost removes RouteHost's route to dst; none is no error, and
// neither is a bridge that is gone (its routes went with it).
func UnrouteHost(name string, dst netip.Prefix) error {
	br, err := netlinksafe.LinkByName(name)
	if IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("looking up %s: %w", name, err)
	}
	// The scope is part of what an IPv4 delete matches (universe, the
	// zero value, would miss this scope-link route).
	err = netlink.RouteDel(hostRoute(br.Attrs().Index, dst))
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// HostRoutes lists the destinations of the bridge's host routes (both
// families). A bridge that does not exist has none.
func HostRoutes(name string) ([]netip.Prefix, error) {
	br, err := netlinksafe.LinkByName(name)
	if IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("looking up %s: %w", name, err)
	}
	// The kernel filters the dump by the bridge, the protocol and the
	// table when the socket asks for strict checking (Linux 4.20 and
	// later): a node with a route per Node and per moved VM (15,000 at
	// 5,000 Nodes) sends these few instead of every route to be parsed
	// and filtered here, which took most of a VMClaims pass (40 ms). An
	// older kernel sends them all, and the filter below does the work.
	h, err := netlinksafe.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("listing %s's routes: %w", name, err)
	}
	defer h.Close()
	_ = h.SetStrictCheck(true)
	rs, err := h.RouteListFiltered(netlink.FAMILY_ALL,
		&netlink.Route{LinkIndex: br.Attrs().Index, Protocol: netlink.RouteProtocol(HostRouteProtocol), Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_OIF|netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, r := range rs {
		if r.Dst == nil {
			continue
		}
		out = append(out, netaddr.Prefix(r.Dst))
	}
	return out, nil
}

package plugin

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Observe reads the attachment's links from the kernel: the host veth in
// this netns, the pod veth and (for a VM pod) the TAP in the pod's, with
// their kind, master, MAC, MTU, state, IPv4 addresses and routes, and tc
// redirects. It judges nothing; compareAttachment does.
func (netlinkDataplane) Observe(netnsPath string, want Attached) (Observed, error) {
	var o Observed
	if _, err := netlinksafe.LinkByName(want.Bridge.Name); err != nil {
		return o, fmt.Errorf("bridge %s: %w", want.Bridge.Name, err)
	}
	host, err := observeLink(want.HostVeth.Name, false)
	if err != nil {
		return o, fmt.Errorf("host veth %s: %w", want.HostVeth.Name, err)
	}
	o.HostVeth = host
	o.PodErr = ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		var err error
		if o.PodVeth, err = observeLink(want.PodVeth.Name, true); err != nil {
			return fmt.Errorf("pod veth %s: %w", want.PodVeth.Name, err)
		}
		if want.Tap == nil {
			return nil
		}
		if o.Tap, err = observeLink(want.Tap.Name, true); err != nil {
			return fmt.Errorf("TAP %s: %w", want.Tap.Name, err)
		}
		return nil
	})
	return o, nil
}

// observeLink reads one link of the current netns: nil, nil when there is
// none. tc reads its ingress redirects (a pod's links have them).
func observeLink(name string, tc bool) (*LinkState, error) {
	l, err := netlinksafe.LinkByName(name)
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	a := l.Attrs()
	s := &LinkState{Name: a.Name, Kind: l.Type(), MAC: a.HardwareAddr.String(), MTU: a.MTU, Up: a.Flags&net.FlagUp != 0}
	if a.MasterIndex != 0 {
		m, err := netlink.LinkByIndex(a.MasterIndex)
		if err != nil {
			return nil, fmt.Errorf("master of %s: %w", name, err)
		}
		s.Master = m.Attrs().Name
	}
	addrs, err := netlinksafe.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("addresses of %s: %w", name, err)
	}
	for _, ad := range addrs {
		if p, ok := netip.AddrFromSlice(ad.IP); ok && !(p.Is6() && p.IsLinkLocalUnicast()) {
			ones, _ := ad.Mask.Size()
			s.Addrs = append(s.Addrs, netip.PrefixFrom(p.Unmap(), ones))
		}
	}
	if s.Routes, err = routesOf(l); err != nil {
		return nil, fmt.Errorf("routes of %s: %w", name, err)
	}
	if tc {
		if s.Redirects, err = redirects(l); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// routesOf lists l's IPv4 routes in the main table, as LinkState holds
// them.
func routesOf(l netlink.Link) ([]Route, error) {
	rs, err := netlinksafe.RouteList(l, netlink.FAMILY_V4)
	if err != nil {
		return nil, err
	}
	rs6, err := netlinksafe.RouteList(l, netlink.FAMILY_V6)
	if err != nil {
		return nil, err
	}
	var out []Route
	for _, r := range append(rs, rs6...) {
		route := Route{Dst: netip.PrefixFrom(netip.IPv4Unspecified(), 0)}
		if r.Family == netlink.FAMILY_V6 {
			if r.Protocol == unix.RTPROT_RA {
				continue
			}
			route.Dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		}
		if r.Dst != nil {
			ip, ok := netip.AddrFromSlice(r.Dst.IP)
			if !ok {
				continue
			}
			ones, _ := r.Dst.Mask.Size()
			route.Dst = netip.PrefixFrom(ip.Unmap(), ones)
			if route.Dst.Addr().Is6() && (route.Dst.Addr().IsLinkLocalUnicast() || route.Dst.Addr().IsMulticast()) {
				continue
			}
		}
		if gw, ok := netip.AddrFromSlice(r.Gw); ok {
			route.Via = gw.Unmap()
		}
		out = append(out, route)
	}
	sortRoutes(out)
	return out, nil
}

// redirects names the links l's ingress match-all u32 filters redirect to
// (mirred egress redirect), as SetupTap installs them, "" for a target
// that is gone.
func redirects(l netlink.Link) ([]string, error) {
	filters, err := netlinksafe.FilterList(l, ingressHandle)
	if err != nil {
		return nil, fmt.Errorf("listing filters of %s: %w", l.Attrs().Name, err)
	}
	var out []string
	for _, f := range filters {
		m, ok := f.(*netlink.U32)
		if !ok || m.Sel == nil || len(m.Sel.Keys) != 1 || m.Sel.Keys[0].Mask != 0 {
			continue
		}
		for _, a := range m.Actions {
			r, ok := a.(*netlink.MirredAction)
			if !ok || r.MirredAction != netlink.TCA_EGRESS_REDIR {
				continue
			}
			// The kernel reports index 0 once the target is gone.
			if r.Ifindex == 0 {
				out = append(out, "")
				continue
			}
			to, err := netlink.LinkByIndex(r.Ifindex)
			if err != nil {
				return nil, fmt.Errorf("redirect target %d of %s: %w", r.Ifindex, l.Attrs().Name, err)
			}
			out = append(out, to.Attrs().Name)
		}
	}
	return out, nil
}

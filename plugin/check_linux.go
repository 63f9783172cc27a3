package plugin

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

// Check verifies, against what ADD reported: the host veth is on the bridge
// and up; in the pod, the veth exists (with the address and default route
// for a plain pod); for a VM pod, the TAP exists and both redirects are in
// place. Every mismatch is reported, joined.
func (netlinkDataplane) Check(netnsPath string, want Attached, addr netip.Prefix) error {
	var errs []error
	br, err := netlinksafe.LinkByName(want.Bridge.Name)
	if err != nil {
		return fmt.Errorf("bridge %s: %w", want.Bridge.Name, err)
	}
	host, err := netlinksafe.LinkByName(want.HostVeth.Name)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("host veth %s: %w", want.HostVeth.Name, err))
	case host.Attrs().MasterIndex != br.Attrs().Index:
		errs = append(errs, fmt.Errorf("host veth %s is not on bridge %s", want.HostVeth.Name, want.Bridge.Name))
	case host.Attrs().Flags&1 == 0:
		errs = append(errs, fmt.Errorf("host veth %s is down", want.HostVeth.Name))
	}
	err = ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		pod, err := netlinksafe.LinkByName(want.PodVeth.Name)
		if err != nil {
			return fmt.Errorf("pod veth %s: %w", want.PodVeth.Name, err)
		}
		if _, ok := pod.(*netlink.Veth); !ok {
			errs = append(errs, fmt.Errorf("%s is a %s, not a veth", want.PodVeth.Name, pod.Type()))
		}
		if want.Tap == nil {
			errs = append(errs, checkAddress(pod, addr))
			return nil
		}
		tap, err := netlinksafe.LinkByName(want.Tap.Name)
		if err != nil {
			return fmt.Errorf("TAP %s: %w", want.Tap.Name, err)
		}
		if tap.Type() != "tuntap" {
			errs = append(errs, fmt.Errorf("%s is a %s, not a TAP", want.Tap.Name, tap.Type()))
		}
		errs = append(errs, checkRedirect(tap, pod), checkRedirect(pod, tap))
		return nil
	})
	return errors.Join(append(errs, err)...)
}

func checkAddress(l netlink.Link, addr netip.Prefix) error {
	addrs, err := netlinksafe.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		if p, ok := netip.AddrFromSlice(a.IP); ok {
			ones, _ := a.Mask.Size()
			if netip.PrefixFrom(p.Unmap(), ones) == addr {
				return nil
			}
		}
	}
	return fmt.Errorf("%s does not have address %s", l.Attrs().Name, addr)
}

func checkRedirect(from, to netlink.Link) error {
	filters, err := netlinksafe.FilterList(from, ingressHandle)
	if err != nil {
		return fmt.Errorf("listing filters of %s: %w", from.Attrs().Name, err)
	}
	for _, f := range filters {
		m, ok := f.(*netlink.U32)
		if !ok || m.Sel == nil || len(m.Sel.Keys) != 1 || m.Sel.Keys[0].Mask != 0 {
			continue
		}
		for _, a := range m.Actions {
			if r, ok := a.(*netlink.MirredAction); ok && r.MirredAction == netlink.TCA_EGRESS_REDIR && r.Ifindex == to.Attrs().Index {
				return nil
			}
		}
	}
	return fmt.Errorf("no redirect from %s to %s", from.Attrs().Name, to.Attrs().Name)
}

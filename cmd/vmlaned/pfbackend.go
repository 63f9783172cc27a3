package main

import (
	"errors"

	"github.com/vmlane/vmlane/internal/sysctl"
	"github.com/vmlane/vmlane/pf"
	"github.com/vmlane/vmlane/routes"
)

// pfBackend is the routes.NATBackend of a macOS node: the no-nat rules in
// vmlane's pf anchor, and IP forwarding on. It is wired here rather than
// in routes, so that routes does not depend on pf. Only macOS runs it, but
// it builds everywhere so that its tests run on Linux too.
type pfBackend struct {
	pf     pfAnchor
	sysctl sysctl.Store
}

// pfAnchor is what pfBackend asks of *pf.PF.
type pfAnchor interface {
	Ensure(rules []string, full bool) (changed bool, err error)
}

// Ensure loads the anchor's rules (pf.Ensure) and, on full passes, turns
// forwarding on for the families that have a pod subnet: without it the
// Mac drops what other nodes route to its VMs. vmnet's shared mode usually
// has it on already, and EnsureForwarding reads before it writes.
func (b pfBackend) Ensure(nat []routes.NATOptions, full bool) error {
	var rules, names []string
	v4, v6 := false, false
	for _, o := range nat {
		rules = append(rules, pf.NoNATRules(o.PodCIDR, o.Cluster)...)
		v4 = v4 || o.PodCIDR.Addr().Is4()
		v6 = v6 || o.PodCIDR.Addr().Is6()
	}
	_, err := b.pf.Ensure(rules, full)
	if full {
		if v4 {
			names = append(names, sysctl.MacIPv4Forwarding)
		}
		if v6 {
			names = append(names, sysctl.MacIPv6Forwarding)
		}
		_, ferr := sysctl.EnsureForwarding(b.sysctl, names...)
		err = errors.Join(err, ferr)
	}
	return err
}

package plugin

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// LinkState is what the dataplane reports of one link: the facts CHECK
// compares, and nothing it would have to interpret.
type LinkState struct {
	Name string
	// Kind is the link type as netlink names it ("bridge", "veth",
	// "tuntap").
	Kind string
	// Master is the name of the link this one is enslaved to ("" for
	// none).
	Master string
	// MAC is the link's own hardware address, as net.HardwareAddr
	// prints it.
	MAC string
	MTU int
	Up  bool
	// Addrs are its IPv4 and global IPv6 addresses (IPv6 link-local
	// ones, which the kernel makes on its own, are left out).
	Addrs []netip.Prefix
	// Routes are the routes of the main table out of this link, sorted
	// by Route.String: IPv4, and IPv6 but for link-local destinations and
	// what router advertisements taught the kernel.
	Routes []Route
	// Redirects are the links its ingress traffic is redirected to by a
	// match-all tc filter with a mirred egress redirect, by name, in the
	// kernel's order; "" is a link that is gone (the filter drops every
	// frame).
	Redirects []string
}

// Route is one route out of a link: to Dst, via Via when it has a
// next hop (the kernel's connected route of an address has none).
type Route struct {
	Dst netip.Prefix
	Via netip.Addr
}

func (r Route) String() string {
	if !r.Via.IsValid() {
		return r.Dst.String()
	}
	return r.Dst.String() + " via " + r.Via.String()
}

// sortRoutes orders routes as LinkState.Routes holds them, so the
// kernel's snapshot and the fake's compare equal whatever the dump order.
func sortRoutes(rs []Route) {
	slices.SortFunc(rs, func(a, b Route) int { return strings.Compare(a.String(), b.String()) })
}

// Observed is the dataplane's snapshot of one attachment: the links named
// in the Attached CHECK was given, nil where there is no such link.
type Observed struct {
	HostVeth, PodVeth, Tap *LinkState
	// PodErr is set when the pod's netns could not be entered or read.
	PodErr error
}

// Expected is what ADD reported of an attachment, as CHECK reads it back
// from the previous result.
type Expected struct {
	Attached
	// Addrs are the pod's addresses, IPv4 then (dual stack) IPv6 (on the
	// pod veth of a plain pod; a VM pod's guest holds them).
	Addrs []netip.Prefix
	// Routes are the result's routes, each out of the pod veth of a
	// plain pod.
	Routes []Route
}

// compareAttachment is CHECK's verdict on o against what ADD reported:
// the host veth up on the bridge, the pod veth a veth and up, each with
// the MAC and MTU the result names, and either the pod's address and
// routes on the pod veth (a plain pod) or the TAP up and redirected to and
// from it (a VM pod). Every mismatch names the link and what is wrong,
// with the value found and the one wanted where there are two. It runs
// the same over the kernel's snapshot and the fake's, so the unit tests
// exercise the check itself, not a copy of it.
func compareAttachment(o Observed, want Expected) error {
	var errs []error
	if h := o.HostVeth; h == nil {
		errs = append(errs, fmt.Errorf("host veth %s: Link not found", want.HostVeth.Name))
	} else {
		if h.Master != want.Bridge.Name {
			errs = append(errs, fmt.Errorf("host veth %s is not on bridge %s (master %q)", want.HostVeth.Name, want.Bridge.Name, h.Master))
		}
		if !h.Up {
			errs = append(errs, fmt.Errorf("host veth %s is down", want.HostVeth.Name))
		}
		errs = append(errs, compareLink("host veth", h, want.HostVeth, true)...)
	}
	if o.PodErr != nil {
		return errors.Join(append(errs, o.PodErr)...)
	}
	pod := o.PodVeth
	if pod == nil {
		return errors.Join(append(errs, fmt.Errorf("pod veth %s: Link not found", want.PodVeth.Name))...)
	}
	errs = append(errs, compareKindUp("pod veth", want.PodVeth.Name, pod, "veth", "veth")...)
	errs = append(errs, compareLink("pod veth", pod, want.PodVeth, true)...)
	if want.Tap == nil {
		for _, a := range want.Addrs {
			if !slices.Contains(pod.Addrs, a) {
				errs = append(errs, fmt.Errorf("%s does not have address %s (has %v)", want.PodVeth.Name, a, pod.Addrs))
			}
		}
		for _, r := range want.Routes {
			if !slices.Contains(pod.Routes, r) {
				errs = append(errs, fmt.Errorf("%s has no route %s (has %v)", want.PodVeth.Name, r, pod.Routes))
			}
		}
		return errors.Join(errs...)
	}
	tap := o.Tap
	if tap == nil {
		return errors.Join(append(errs, fmt.Errorf("TAP %s: Link not found", want.Tap.Name))...)
	}
	errs = append(errs, compareKindUp("TAP", want.Tap.Name, tap, "tuntap", "TAP")...)
	// The result's MAC for the TAP is the guest's, not the TAP's own.
	errs = append(errs, compareLink("TAP", tap, *want.Tap, false)...)
	errs = append(errs, compareRedirects(want.Tap.Name, tap.Redirects, want.PodVeth.Name))
	errs = append(errs, compareRedirects(want.PodVeth.Name, pod.Redirects, want.Tap.Name))
	return errors.Join(errs...)
}

// compareRedirects wants from's ingress redirected to to alone: a second
// filter, to a link that is gone say, may take the frames first.
func compareRedirects(from string, got []string, to string) error {
	switch {
	case !slices.Contains(got, to):
		return fmt.Errorf("no redirect from %s to %s", from, to)
	case len(got) > 1:
		return fmt.Errorf("%s redirects to %q, want %s alone (\"\" is a link that is gone)", from, got, to)
	}
	return nil
}

// compareKindUp reports a link that is not of kind (called what in the
// message) or is down.
func compareKindUp(role, name string, got *LinkState, kind, what string) []error {
	var errs []error
	if got.Kind != kind {
		errs = append(errs, fmt.Errorf("%s is a %s, not a %s", name, got.Kind, what))
	}
	if !got.Up {
		errs = append(errs, fmt.Errorf("%s %s is down", role, name))
	}
	return errs
}

// compareLink compares the MAC (when mac is set) and MTU the result
// reported for a link with the link's. A result that leaves a field out
// (the MTU before spec 1.1) is not held against the link.
func compareLink(role string, got *LinkState, want Link, mac bool) []error {
	var errs []error
	if mac && want.MAC != "" && !strings.EqualFold(got.MAC, want.MAC) {
		errs = append(errs, fmt.Errorf("%s %s has MAC %s, the result says %s", role, want.Name, got.MAC, want.MAC))
	}
	if want.MTU != 0 && got.MTU != want.MTU {
		errs = append(errs, fmt.Errorf("%s %s has MTU %d, the result says %d", role, want.Name, got.MTU, want.MTU))
	}
	return errs
}

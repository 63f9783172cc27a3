package plugin

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
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
	Up     bool
	// Addrs are its IPv4 addresses.
	Addrs []netip.Prefix
	// Redirects are the links its ingress traffic is redirected to by a
	// match-all tc filter with a mirred egress redirect, by name.
	Redirects []string
}

// Observed is the dataplane's snapshot of one attachment: the links named
// in the Attached CHECK was given, nil where there is no such link. Err*
// say why a link could not be read when it was not simply missing.
type Observed struct {
	HostVeth, PodVeth, Tap *LinkState
	// PodErr is set when the pod's netns could not be entered or read.
	PodErr error
}

// compareAttachment is CHECK's verdict on o against what ADD reported:
// the host veth up on the bridge, the pod veth a veth, and either the
// pod's address on it (a plain pod) or the TAP redirected to and from it
// (a VM pod). It runs the same over the kernel's snapshot and the fake's,
// so the unit tests exercise the check itself, not a copy of it.
func compareAttachment(o Observed, want Attached, addr netip.Prefix) error {
	var errs []error
	switch h := o.HostVeth; {
	case h == nil:
		errs = append(errs, fmt.Errorf("host veth %s: Link not found", want.HostVeth.Name))
	case h.Master != want.Bridge.Name:
		errs = append(errs, fmt.Errorf("host veth %s is not on bridge %s", want.HostVeth.Name, want.Bridge.Name))
	case !h.Up:
		errs = append(errs, fmt.Errorf("host veth %s is down", want.HostVeth.Name))
	}
	if o.PodErr != nil {
		return errors.Join(append(errs, o.PodErr)...)
	}
	pod := o.PodVeth
	if pod == nil {
		return errors.Join(append(errs, fmt.Errorf("pod veth %s: Link not found", want.PodVeth.Name))...)
	}
	if pod.Kind != "veth" {
		errs = append(errs, fmt.Errorf("%s is a %s, not a veth", want.PodVeth.Name, pod.Kind))
	}
	if want.Tap == nil {
		if !slices.Contains(pod.Addrs, addr) {
			errs = append(errs, fmt.Errorf("%s does not have address %s", want.PodVeth.Name, addr))
		}
		return errors.Join(errs...)
	}
	tap := o.Tap
	if tap == nil {
		return errors.Join(append(errs, fmt.Errorf("TAP %s: Link not found", want.Tap.Name))...)
	}
	if tap.Kind != "tuntap" {
		errs = append(errs, fmt.Errorf("%s is a %s, not a TAP", want.Tap.Name, tap.Kind))
	}
	if !slices.Contains(tap.Redirects, want.PodVeth.Name) {
		errs = append(errs, fmt.Errorf("no redirect from %s to %s", want.Tap.Name, want.PodVeth.Name))
	}
	if !slices.Contains(pod.Redirects, want.Tap.Name) {
		errs = append(errs, fmt.Errorf("no redirect from %s to %s", want.PodVeth.Name, want.Tap.Name))
	}
	return errors.Join(errs...)
}

package plugin

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/vmlane/vmlane/internal/antispoof"
	"github.com/vmlane/vmlane/internal/bridge"
	"github.com/vmlane/vmlane/leases"
)

// The dataplane methods of fakeDataplane: each logs its call, applies an
// armed fault (see enterLocked), and changes the model as the kernel
// would.

func (f *fakeDataplane) DefaultMTU() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.defaultMTU
}

func (f *fakeDataplane) CheckNetns(path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if before, _ := f.enterLocked("CheckNetns", path); before != nil {
		return before
	}
	if !f.netns[path] {
		return fmt.Errorf("%w: %s", errNoNetns, path)
	}
	return nil
}

func (f *fakeDataplane) EnsureBridge(name string, gw netip.Prefix, mtu int, mac string) (Link, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	before, after := f.enterLocked("EnsureBridge", name, gw, mtu, mac)
	if before != nil {
		return Link{}, before
	}
	k := fakeLinkKey{"", name}
	l := f.links[k]
	if l == nil {
		l = &fakeLink{kind: "bridge", autoMAC: fakeMAC("", name), mtu: mtu, mtuAuto: true}
		f.links[k] = l
	}
	if l.kind != "bridge" {
		return Link{}, &bridge.NotBridgeError{Name: name, Type: l.kind}
	}
	if l.mtu != mtu {
		l.mtu, l.mtuAuto = mtu, false
	}
	l.mac, l.up = mac, true
	l.addrs = []netip.Prefix{gw}
	if after != nil {
		return Link{}, after
	}
	return Link{Name: name, MAC: mac, MTU: mtu}, nil
}

func (f *fakeDataplane) EnableForwarding6() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	before, after := f.enterLocked("EnableForwarding6")
	if before != nil {
		return before
	}
	f.forwarding6 = true
	return after
}

func (f *fakeDataplane) EnsureBridgeAddr(name string, gw netip.Prefix) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	before, after := f.enterLocked("EnsureBridgeAddr", name, gw)
	if before != nil {
		return before
	}
	l := f.links[fakeLinkKey{"", name}]
	switch {
	case l == nil:
		return errors.New("Link not found")
	case l.kind != "bridge":
		return &bridge.NotBridgeError{Name: name, Type: l.kind}
	}
	l.addrs = slices.DeleteFunc(l.addrs, func(a netip.Prefix) bool { return a.Addr().Is6() == gw.Addr().Is6() && a != gw })
	if !slices.Contains(l.addrs, gw) {
		l.addrs = append(l.addrs, gw)
	}
	return after
}

func (f *fakeDataplane) EnableForwarding() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	before, after := f.enterLocked("EnableForwarding")
	if before != nil {
		return before
	}
	f.forwarding = true
	return after
}

func (f *fakeDataplane) EnableProxy(bridge string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	before, after := f.enterLocked("EnableProxy", bridge)
	if before != nil {
		return before
	}
	return after
}

func (f *fakeDataplane) SetupVeth(netns, podIf, hostIf, bridge string, mtu int, podMAC string, quiet bool, guard *VethGuard) (Link, Link, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	before, after := f.enterLocked("SetupVeth", netns, podIf, hostIf, bridge, mtu, podMAC, quiet)
	if before != nil {
		return Link{}, Link{}, before
	}
	if !f.netns[netns] {
		return Link{}, Link{}, fmt.Errorf("%w: %s", errNoNetns, netns)
	}
	if br := f.links[fakeLinkKey{"", bridge}]; br == nil || br.kind != "bridge" {
		return Link{}, Link{}, fmt.Errorf("bridge %s: Link not found", bridge)
	}
	hk, pk := fakeLinkKey{"", hostIf}, fakeLinkKey{netns, podIf}
	if f.links[hk] != nil || f.links[pk] != nil {
		return Link{}, Link{}, fmt.Errorf("%s or %s already exists in the pod: file exists", hostIf, podIf)
	}
	host := &fakeLink{kind: "veth", master: bridge, autoMAC: fakeMAC("", hostIf), mtu: mtu, up: true, peer: pk, hairpin: true}
	if guard != nil {
		// A chain of the netdev table bound to the link: the kernel
		// removes it with the link (before Linux 6.16), as the fake does.
		host.guardChain = guard.Table
	}
	pod := &fakeLink{kind: "veth", mac: podMAC, autoMAC: fakeMAC(netns, podIf), mtu: mtu, up: true, quiet: quiet, peer: hk}
	f.links[hk], f.links[pk] = host, pod
	f.adjustBridgeMTUsLocked()
	if after != nil {
		return Link{}, Link{}, after
	}
	return Link{Name: hostIf, MAC: host.effectiveMAC(), MTU: mtu},
		Link{Name: podIf, MAC: pod.effectiveMAC(), MTU: mtu, Sandbox: netns}, nil
}

func (f *fakeDataplane) ConfigureAddress(netns, podIf string, addr netip.Prefix, gw netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	before, after := f.enterLocked("ConfigureAddress", netns, podIf, addr, gw)
	if before != nil {
		return before
	}
	l := f.links[fakeLinkKey{netns, podIf}]
	if l == nil {
		return fmt.Errorf("%s in %s: Link not found", podIf, netns)
	}
	if !slices.Contains(l.addrs, addr) {
		l.addrs = append(l.addrs, addr)
	}
	if gw.Is6() {
		l.gateway6 = gw
	} else {
		l.gateway = gw
	}
	return after
}

func (f *fakeDataplane) SetupTap(netns string, spec TapSpec) (Link, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	tap, podIf, mtu, multiQueue := spec.Name, spec.PodIf, spec.MTU, spec.MultiQueue
	before, after := f.enterLocked("SetupTap", netns, tap, podIf, mtu, multiQueue)
	if before != nil {
		return Link{}, before
	}
	if !f.netns[netns] {
		return Link{}, fmt.Errorf("%w: %s", errNoNetns, netns)
	}
	flags := "vnet_hdr one_queue"
	if multiQueue {
		flags = "vnet_hdr multi_queue"
	}
	tk, pk := fakeLinkKey{netns, tap}, fakeLinkKey{netns, podIf}
	t := f.links[tk]
	switch {
	case t == nil:
		t = &fakeLink{kind: "tuntap", tapFlags: flags, autoMAC: fakeMAC(netns, tap)}
		f.links[tk] = t
	case t.kind != "tuntap":
		return Link{}, fmt.Errorf("creating: %s is a %s: file exists", tap, t.kind)
	case t.tapFlags != flags:
		return Link{}, fmt.Errorf("creating: TUNSETIFF on %s (%s, want %s): invalid argument", tap, t.tapFlags, flags)
	}
	t.mtu, t.up, t.quiet, t.tapFor = mtu, true, true, podIf
	p := f.links[pk]
	if p == nil {
		return Link{}, fmt.Errorf("%s: Link not found", podIf)
	}
	// An ingress qdisc that was there is made anew, its filters gone.
	t.ingress, t.redirects = true, []string{podIf}
	p.ingress, p.redirects = true, []string{tap}
	if after != nil {
		return Link{}, after
	}
	return Link{Name: tap, MTU: mtu, Sandbox: netns}, nil
}

func (f *fakeDataplane) RouteHost(bridge string, dst netip.Prefix) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	before, after := f.enterLocked("RouteHost", bridge, dst.String())
	if before != nil {
		return before
	}
	if f.links[fakeLinkKey{"", bridge}] == nil {
		return fmt.Errorf("no bridge %s", bridge)
	}
	if f.hostRoutes == nil {
		f.hostRoutes = map[netip.Prefix]string{}
	}
	f.hostRoutes[dst] = bridge
	return after
}

func (f *fakeDataplane) UnrouteHost(bridge string, dst netip.Prefix) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	before, after := f.enterLocked("UnrouteHost", bridge, dst.String())
	if before != nil {
		return before
	}
	delete(f.hostRoutes, dst)
	return after
}

func (f *fakeDataplane) Guard(_ string, p antispoof.Port, _ *antispoof.View) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	before, after := f.enterLocked("Guard", p.String())
	if before != nil {
		return before
	}
	if err := p.Validate(); err != nil {
		return err
	}
	if f.guardErr != nil {
		return f.guardErr
	}
	if f.guards == nil {
		f.guards = map[string]antispoof.Port{}
	}
	f.guards[p.Name] = p
	return after
}

func (f *fakeDataplane) Unguard(_ string, ports ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	before, after := f.enterLocked("Unguard", anys(ports)...)
	if before != nil {
		return before
	}
	for _, p := range ports {
		delete(f.guards, p)
	}
	return after
}

func (f *fakeDataplane) Guarded(string) (antispoof.View, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if before, _ := f.enterLocked("Guarded"); before != nil {
		return antispoof.View{}, before
	}
	// Sorted by name, as antispoof.Table.Ports returns them.
	ports := slices.SortedFunc(maps.Values(f.guards), func(a, b antispoof.Port) int { return strings.Compare(a.Name, b.Name) })
	return antispoof.View{Ports: ports, Exists: f.guards != nil}, nil
}

func (f *fakeDataplane) DeleteHostLink(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if before, _ := f.enterLocked("DeleteHostLink", name); before != nil {
		return before
	}
	f.deleteLinkLocked(fakeLinkKey{"", name})
	return nil
}

func (f *fakeDataplane) DeleteNetnsLinks(netns string, names ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if before, _ := f.enterLocked("DeleteNetnsLinks", append([]any{netns}, anys(names)...)...); before != nil {
		return before
	}
	if !f.netns[netns] {
		return nil // the netns is gone, and its links with it
	}
	for _, n := range names {
		f.deleteLinkLocked(fakeLinkKey{netns, n})
	}
	return nil
}

// TapHolder reports the model's link as netlinkDataplane.TapHolder
// reports the kernel's.
func (f *fakeDataplane) TapHolder(netns, tap, podIf string) (TapState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if before, _ := f.enterLocked("TapHolder", netns, tap, podIf); before != nil {
		return TapState{}, before
	}
	if !f.netns[netns] {
		return TapState{}, fmt.Errorf("%w: %s", errNoNetns, netns)
	}
	l := f.links[fakeLinkKey{netns, tap}]
	if l == nil {
		return TapState{}, nil
	}
	st := TapState{Exists: true, Vmlane: l.kind == "tuntap" && (l.tapFor != "" || len(l.redirects) > 0), Mine: l.kind == "tuntap" && l.tapFor == podIf}
	for _, r := range l.redirects {
		if r != "" {
			st.Holder = r
		}
	}
	return st, nil
}

func anys(s []string) []any {
	out := make([]any, len(s))
	for i, x := range s {
		out[i] = x
	}
	return out
}

// Observe reports the model's links as netlinkDataplane.Observe reports
// the kernel's.
func (f *fakeDataplane) Observe(netns string, want Attached) (Observed, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if before, _ := f.enterLocked("Observe", netns, want.HostVeth.Name); before != nil {
		return Observed{}, before
	}
	if br := f.links[fakeLinkKey{"", want.Bridge.Name}]; br == nil {
		return Observed{}, fmt.Errorf("bridge %s: Link not found", want.Bridge.Name)
	}
	o := Observed{HostVeth: f.stateLocked("", want.HostVeth.Name)}
	if !f.netns[netns] {
		o.PodErr = fmt.Errorf("failed to Statfs %q: no such file or directory", netns)
		return o, nil
	}
	o.PodVeth = f.stateLocked(netns, want.PodVeth.Name)
	if want.Tap != nil {
		o.Tap = f.stateLocked(netns, want.Tap.Name)
	}
	return o, nil
}

// stateLocked reports a link as Observe does; nil when there is none.
// The caller holds f.mu.
func (f *fakeDataplane) stateLocked(netns, name string) *LinkState {
	l := f.links[fakeLinkKey{netns, name}]
	if l == nil {
		return nil
	}
	s := &LinkState{Name: name, Kind: l.kind, Master: l.master, MAC: l.effectiveMAC(), MTU: l.mtu, Up: l.up, Addrs: slices.Clone(l.addrs)}
	// The kernel's route for each address's subnet, which it keeps
	// only while the link is up.
	for _, a := range l.addrs {
		if l.up {
			s.Routes = append(s.Routes, Route{Dst: a.Masked()})
		}
	}
	if l.gateway.IsValid() {
		s.Routes = append(s.Routes, Route{Dst: netip.PrefixFrom(netip.IPv4Unspecified(), 0), Via: l.gateway})
	}
	if l.gateway6.IsValid() {
		s.Routes = append(s.Routes, Route{Dst: netip.PrefixFrom(netip.IPv6Unspecified(), 0), Via: l.gateway6})
	}
	sortRoutes(s.Routes)
	s.Redirects = slices.Clone(l.redirects)
	return s
}

func (f *fakeDataplane) BridgeStatus(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if before, _ := f.enterLocked("BridgeStatus", name); before != nil {
		return before
	}
	l := f.links[fakeLinkKey{"", name}]
	switch {
	case l == nil:
		return errors.New("Link not found")
	case l.kind != "bridge":
		return &bridge.NotBridgeError{Name: name, Type: l.kind}
	case !l.up:
		return errors.New("bridge is down")
	}
	return nil
}

func (f *fakeDataplane) Unmap(network, cniVersion string, key leases.Key) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	before, after := f.enterLocked("Unmap", network, key.String())
	if before != nil {
		return before
	}
	f.unmapped = append(f.unmapped, network+" "+key.String())
	return after
}

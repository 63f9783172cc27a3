package plugin

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vmlane/vmlane/internal/antispoof"
	"github.com/vmlane/vmlane/internal/bridge"
)

// fakeDataplane is a recording fake of the dataplane interface. It keeps a
// model of the host netns and the pods' netns (links with kind, master,
// MAC, MTU, up, addresses, routes, ingress qdisc and redirect), prints it
// as `ip`/`tc`/`sysctl` lines (see state), logs every call, and fails the
// Nth call of a method when told to (see failNth).
//
// It follows the kernel where the plugin relies on it: deleting one end of
// a veth deletes the other, a netns going away takes its links (and their
// veth peers) with it, deletes of what is missing succeed, creating a link
// whose name is taken fails, creating a TAP over an existing persistent
// TAP attaches to it (TUNSETIFF) rather than failing, a redirect whose
// target is deleted stays and goes nowhere, and a link taken down loses its
// routes. TestFakeMatchesKernel holds it to the kernel.
type fakeDataplane struct {
	mu         sync.Mutex
	defaultMTU int
	forwarding bool
	netns      map[string]bool // pod netns paths that exist
	links      map[fakeLinkKey]*fakeLink
	guards     map[string]antispoof.Port // by port name
	guardErr   error                     // what Guard returns, if set
	calls      []string
	counts     map[string]int
	faults     map[string]*fakeFault
}

// fakeLinkKey names a link: netns "" is the host's.
type fakeLinkKey struct{ netns, name string }

type fakeLink struct {
	kind    string // bridge, veth, tuntap, or anything else for foreign links
	master  string
	mac     string // set explicitly; printed
	autoMAC string // what the kernel would have picked; not printed
	mtu     int
	// mtuAuto: a bridge whose MTU was only given at creation, which the
	// kernel keeps at its ports' lowest (1500 with none) as they come and
	// go; setting it later pins it (BROPT_MTU_SET_BY_USER).
	mtuAuto  bool
	up       bool
	quiet    bool // addrgenmode none
	addrs    []netip.Prefix
	gateway  netip.Addr  // default route via
	peer     fakeLinkKey // veth only
	tapFlags string      // tuntap only
	ingress  bool        // has an ingress qdisc
	// redirects are the ingress filters' mirred egress redirect targets
	// (links of the same netns); "" is one that was deleted since, as
	// the kernel keeps the filter with no device.
	redirects []string
}

// fakeFault fails call number n (counted from when it was armed) of a
// method. A partial fault does the method's work first, as when a netlink
// call halfway through fails.
type fakeFault struct {
	n       int
	partial bool
}

// errInjected is what an armed fault returns.
var errInjected = errors.New("injected failure")

func newFakeDataplane() *fakeDataplane {
	return &fakeDataplane{
		defaultMTU: 1500,
		netns:      make(map[string]bool),
		links:      make(map[fakeLinkKey]*fakeLink),
		counts:     make(map[string]int),
		faults:     make(map[string]*fakeFault),
	}
}

var _ dataplane = (*fakeDataplane)(nil)

// addNetns makes a pod netns exist.
func (f *fakeDataplane) addNetns(path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.netns[path] = true
}

// removeNetns destroys a pod netns as the kernel does: its links go, and a
// veth's peer in another netns goes with it.
func (f *fakeDataplane) removeNetns(path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.netns, path)
	for k := range f.links {
		if k.netns == path {
			f.deleteLinkLocked(k)
		}
	}
}

// addForeignLink puts a link that is not vmlane's into the host netns
// (the uplink, say).
func (f *fakeDataplane) addForeignLink(name, kind string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.links[fakeLinkKey{"", name}] = &fakeLink{kind: kind, mtu: 1500, up: true, autoMAC: fakeMAC("", name)}
}

// setUp sets a link's admin state, as `ip link set NAME up|down` would.
// Down takes the link's IPv4 routes with it, and up brings back only
// the kernel's own route for each address, as the kernel does.
func (f *fakeDataplane) setUp(netns, name string, up bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l := f.links[fakeLinkKey{netns, name}]; l != nil {
		l.up = up
		if !up {
			l.gateway = netip.Addr{}
		}
	}
}

// setMAC, setMTU and setMaster change a link behind the plugin's back.
func (f *fakeDataplane) setMAC(netns, name, mac string) {
	f.change(netns, name, func(l *fakeLink) { l.mac = mac })
}

func (f *fakeDataplane) setMTU(netns, name string, mtu int) {
	f.change(netns, name, func(l *fakeLink) { l.mtu = mtu })
}

func (f *fakeDataplane) setMaster(netns, name, master string) {
	f.change(netns, name, func(l *fakeLink) { l.master = master })
}

func (f *fakeDataplane) change(netns, name string, fn func(*fakeLink)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l := f.links[fakeLinkKey{netns, name}]; l != nil {
		fn(l)
	}
}

// deleteLink deletes a link behind the plugin's back.
func (f *fakeDataplane) deleteLink(netns, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleteLinkLocked(fakeLinkKey{netns, name})
}

// failNth makes the nth call (1-based) of method from now on fail.
func (f *fakeDataplane) failNth(method string, n int, partial bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts[method] = 0
	f.faults[method] = &fakeFault{n: n, partial: partial}
}

// callLog returns the calls made so far, one "Method(args)" each.
func (f *fakeDataplane) callLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// hasLink reports whether a link exists.
func (f *fakeDataplane) hasLink(netns, name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.links[fakeLinkKey{netns, name}] != nil
}

// enter logs a call and applies an armed fault: before is returned at once,
// after once the work is done. The caller holds f.mu.
func (f *fakeDataplane) enterLocked(method string, args ...any) (before, after error) {
	s := make([]string, len(args))
	for i, a := range args {
		s[i] = fmt.Sprint(a)
	}
	f.calls = append(f.calls, method+"("+strings.Join(s, ", ")+")")
	f.counts[method]++
	flt := f.faults[method]
	if flt == nil || f.counts[method] != flt.n {
		return nil, nil
	}
	delete(f.faults, method)
	err := fmt.Errorf("%s: %w", method, errInjected)
	if flt.partial {
		return nil, err
	}
	return err, nil
}

// fakeMAC is the MAC the fake's kernel gives a link: random-looking but
// stable, so results are reproducible.
func fakeMAC(netns, name string) string {
	h := sha256.Sum256([]byte(netns + "\x00" + name))
	h[0] = h[0]&^1 | 2 // locally administered unicast, as the kernel's random MACs
	return net.HardwareAddr(h[:6]).String()
}

func (l *fakeLink) effectiveMAC() string {
	if l.mac != "" {
		return l.mac
	}
	return l.autoMAC
}

func (f *fakeDataplane) deleteLinkLocked(k fakeLinkKey) {
	l := f.links[k]
	if l == nil {
		return
	}
	gone := []fakeLinkKey{k}
	if l.kind == "veth" {
		gone = append(gone, l.peer)
	}
	for _, g := range gone {
		delete(f.links, g)
		for k, o := range f.links {
			for i, r := range o.redirects {
				if k.netns == g.netns && r == g.name {
					o.redirects[i] = ""
				}
			}
		}
	}
	f.adjustBridgeMTUsLocked()
}

// adjustBridgeMTUsLocked does what the kernel's br_mtu_auto_adjust does
// when a port joins or leaves. The caller holds f.mu.
func (f *fakeDataplane) adjustBridgeMTUsLocked() {
	for k, br := range f.links {
		if br.kind != "bridge" || !br.mtuAuto {
			continue
		}
		lowest := 0
		for pk, p := range f.links {
			if pk.netns == k.netns && p.master == k.name && (lowest == 0 || p.mtu < lowest) {
				lowest = p.mtu
			}
		}
		if lowest == 0 {
			lowest = 1500
		}
		br.mtu = lowest
	}
}

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

func (f *fakeDataplane) SetupVeth(netns, podIf, hostIf, bridge string, mtu int, podMAC string, quiet bool) (Link, Link, error) {
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
	host := &fakeLink{kind: "veth", master: bridge, autoMAC: fakeMAC("", hostIf), mtu: mtu, up: true, peer: pk}
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
	l.gateway = gw
	return after
}

func (f *fakeDataplane) SetupTap(netns, tap, podIf string, mtu int, multiQueue bool) (Link, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
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
	t.mtu, t.up, t.quiet = mtu, true, true
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

func (f *fakeDataplane) Guard(p antispoof.Port) error {
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

func (f *fakeDataplane) Unguard(ports ...string) error {
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

func (f *fakeDataplane) Guarded() ([]antispoof.Port, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if before, _ := f.enterLocked("Guarded"); before != nil {
		return nil, before
	}
	// Sorted by name, as antispoof.Table.Ports returns them.
	return slices.SortedFunc(maps.Values(f.guards), func(a, b antispoof.Port) int { return strings.Compare(a.Name, b.Name) }), nil
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

// state prints the model, sorted, as the commands that would build it:
//
//	sysctl -w net.ipv4.ip_forward=1
//	ip link add vmlane0 type bridge
//	ip link set vmlane0 address 02:76:0a:f4:03:01 mtu 1500 up
//	ip addr add 10.244.3.1/24 dev vmlane0
//	ip link add vml… type veth peer name eth0 netns /run/netns/a
//	ip link set vml… master vmlane0 mtu 1500 up
//	ip -n /run/netns/a link set eth0 mtu 1500 addrgenmode none up
//	ip -n /run/netns/a tuntap add tap0 mode tap vnet_hdr one_queue
//	tc -n /run/netns/a qdisc add dev tap0 ingress
//	tc -n /run/netns/a filter add dev tap0 ingress prio 1 protocol all u32 match u32 0 0 action mirred egress redirect dev eth0
//
// Kernel-chosen MACs are left out, as `ip link add` leaves them out.
func (f *fakeDataplane) state() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	if f.forwarding {
		out = append(out, "sysctl -w net.ipv4.ip_forward=1")
	}
	for k, l := range f.links {
		ip, tc := "ip ", "tc "
		if k.netns != "" {
			ip, tc = "ip -n "+k.netns+" ", "tc -n "+k.netns+" "
		}
		switch l.kind {
		case "veth":
			// One "add" line per pair, from its host end.
			if k.netns == "" {
				add := ip + "link add " + k.name + " type veth peer name " + l.peer.name
				if l.peer.netns != "" {
					add += " netns " + l.peer.netns
				}
				out = append(out, add)
			}
		case "tuntap":
			out = append(out, ip+"tuntap add "+k.name+" mode tap "+l.tapFlags)
		default:
			out = append(out, ip+"link add "+k.name+" type "+l.kind)
		}
		set := ip + "link set " + k.name
		if l.master != "" {
			set += " master " + l.master
		}
		if l.mac != "" {
			set += " address " + l.mac
		}
		set += fmt.Sprintf(" mtu %d", l.mtu)
		if l.quiet {
			set += " addrgenmode none"
		}
		if l.up {
			set += " up"
		} else {
			set += " down"
		}
		out = append(out, set)
		for _, a := range l.addrs {
			out = append(out, ip+"addr add "+a.String()+" dev "+k.name)
		}
		if l.gateway.IsValid() {
			out = append(out, ip+"route add default via "+l.gateway.String()+" dev "+k.name)
		}
		if l.ingress {
			out = append(out, tc+"qdisc add dev "+k.name+" ingress")
		}
		for _, r := range l.redirects {
			if r == "" {
				r = "(none)"
			}
			out = append(out, tc+"filter add dev "+k.name+" ingress prio 1 protocol all u32 match u32 0 0 action mirred egress redirect dev "+r)
		}
	}
	for _, p := range f.guards {
		out = append(out, fmt.Sprintf("nft add element bridge vmlane addrs { %s . %s . %s }", p.Name, p.MAC, p.IP))
	}
	slices.Sort(out)
	return out
}

// links lists the links of a netns ("" for the host's), sorted.
func (f *fakeDataplane) linkNames(netns string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for k := range f.links {
		if k.netns == netns {
			out = append(out, k.name)
		}
	}
	slices.Sort(out)
	return out
}

// TestFakeDataplane checks the fake against the kernel behaviour the
// plugin tests rely on.
func TestFakeDataplane(t *testing.T) {
	gw := netip.MustParsePrefix("10.0.0.1/24")
	build := func(t *testing.T) *fakeDataplane {
		f := newFakeDataplane()
		f.addNetns("/run/netns/p")
		if _, err := f.EnsureBridge("br0", gw, 1500, "02:76:0a:00:00:01"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := f.SetupVeth("/run/netns/p", "eth0", "vh", "br0", 1500, "", true); err != nil {
			t.Fatal(err)
		}
		if _, err := f.SetupTap("/run/netns/p", "tap0", "eth0", 1500, false); err != nil {
			t.Fatal(err)
		}
		return f
	}
	brLines := []string{
		"ip addr add 10.0.0.1/24 dev br0",
		"ip link add br0 type bridge",
		"ip link set br0 address 02:76:0a:00:00:01 mtu 1500 up",
	}
	tap := []string{
		"ip -n /run/netns/p link set tap0 mtu 1500 addrgenmode none up",
		"ip -n /run/netns/p tuntap add tap0 mode tap vnet_hdr one_queue",
		"tc -n /run/netns/p filter add dev tap0 ingress prio 1 protocol all u32 match u32 0 0 action mirred egress redirect dev eth0",
		"tc -n /run/netns/p qdisc add dev tap0 ingress",
	}
	sorted := func(parts ...[]string) []string { return slices.Sorted(slices.Values(slices.Concat(parts...))) }

	t.Run("state", func(t *testing.T) {
		f := build(t)
		want := sorted(brLines, tap, []string{
			"ip -n /run/netns/p link set eth0 mtu 1500 addrgenmode none up",
			"ip link add vh type veth peer name eth0 netns /run/netns/p",
			"ip link set vh master br0 mtu 1500 up",
			"tc -n /run/netns/p filter add dev eth0 ingress prio 1 protocol all u32 match u32 0 0 action mirred egress redirect dev tap0",
			"tc -n /run/netns/p qdisc add dev eth0 ingress",
		})
		if diff := cmp.Diff(want, f.state()); diff != "" {
			t.Errorf("state (-want +got):\n%s", diff)
		}
	})
	t.Run("deleting the host end takes the peer", func(t *testing.T) {
		f := build(t)
		if err := f.DeleteHostLink("vh"); err != nil {
			t.Fatal(err)
		}
		if err := f.DeleteHostLink("vh"); err != nil {
			t.Fatalf("deleting a missing link: %v", err)
		}
		// The TAP's redirect stays, going nowhere, as in the kernel.
		dangling := slices.Clone(tap)
		dangling[2] = strings.Replace(dangling[2], "redirect dev eth0", "redirect dev (none)", 1)
		if diff := cmp.Diff(sorted(brLines, dangling), f.state()); diff != "" {
			t.Errorf("state (-want +got):\n%s", diff)
		}
	})
	t.Run("netns going takes its links and their peers", func(t *testing.T) {
		f := build(t)
		f.removeNetns("/run/netns/p")
		if diff := cmp.Diff(sorted(brLines), f.state()); diff != "" {
			t.Errorf("state (-want +got):\n%s", diff)
		}
		if err := f.DeleteNetnsLinks("/run/netns/p", "eth0", "tap0"); err != nil {
			t.Errorf("deleting in a missing netns: %v", err)
		}
		if err := f.CheckNetns("/run/netns/p"); !errors.Is(err, errNoNetns) {
			t.Errorf("CheckNetns of a missing netns: %v", err)
		}
	})
	t.Run("names are taken", func(t *testing.T) {
		f := build(t)
		if _, _, err := f.SetupVeth("/run/netns/p", "eth0", "vh2", "br0", 1500, "", false); err == nil {
			t.Error("a second eth0 in one netns")
		}
		if _, err := f.SetupTap("/run/netns/p", "eth0", "eth0", 1500, false); err == nil {
			t.Error("a TAP over a veth")
		}
		if _, err := f.SetupTap("/run/netns/p", "tap0", "eth0", 1500, true); err == nil {
			t.Error("a multi-queue TAP over a single-queue one")
		}
		f.addForeignLink("eth9", "device")
		var nb *bridge.NotBridgeError
		if _, err := f.EnsureBridge("eth9", gw, 1500, "02:76:0a:00:00:01"); !errors.As(err, &nb) || nb.Name != "eth9" || nb.Type != "device" {
			t.Errorf("EnsureBridge over a device: %v", err)
		}
	})
	t.Run("faults", func(t *testing.T) {
		f := newFakeDataplane()
		f.addNetns("/run/netns/p")
		f.failNth("EnsureBridge", 2, false)
		f.failNth("EnableForwarding", 1, true)
		if _, err := f.EnsureBridge("br0", gw, 1500, "02:76:0a:00:00:01"); err != nil {
			t.Fatalf("call 1: %v", err)
		}
		if _, err := f.EnsureBridge("br0", gw, 1400, "02:76:0a:00:00:01"); !errors.Is(err, errInjected) {
			t.Fatalf("call 2: %v", err)
		}
		if _, err := f.EnsureBridge("br0", gw, 1500, "02:76:0a:00:00:01"); err != nil {
			t.Fatalf("call 3: %v", err)
		}
		if err := f.EnableForwarding(); !errors.Is(err, errInjected) {
			t.Fatalf("partial fault: %v", err)
		}
		if !slices.Contains(f.state(), "sysctl -w net.ipv4.ip_forward=1") {
			t.Error("a partial fault did not do the work")
		}
		want := []string{
			"EnsureBridge(br0, 10.0.0.1/24, 1500, 02:76:0a:00:00:01)",
			"EnsureBridge(br0, 10.0.0.1/24, 1400, 02:76:0a:00:00:01)",
			"EnsureBridge(br0, 10.0.0.1/24, 1500, 02:76:0a:00:00:01)",
			"EnableForwarding()",
		}
		if diff := cmp.Diff(want, f.callLog()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
	})
}

package plugin

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/vmlane/vmlane/internal/antispoof"
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
	// forwarding6 is net.ipv6.conf.all.forwarding.
	forwarding6 bool
	netns       map[string]bool // pod netns paths that exist
	links       map[fakeLinkKey]*fakeLink
	guards      map[string]antispoof.Port // by port name
	guardErr    error                     // what Guard returns, if set
	// hostRoutes are RouteHost's routes: destination to bridge.
	hostRoutes map[netip.Prefix]string
	// unmapped are the attachments Unmap was asked for ("NETWORK KEY").
	unmapped []string
	calls    []string
	counts   map[string]int
	faults   map[string]*fakeFault
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
	mtuAuto bool
	up      bool
	quiet   bool // addrgenmode none
	// guardChain is the anti-spoofing table whose ingress chain checks
	// the link (SetupVeth's guard), empty for none.
	guardChain string
	// hairpin is the bridge port's hairpin mode.
	hairpin  bool
	addrs    []netip.Prefix
	gateway  netip.Addr  // default route via
	gateway6 netip.Addr  // IPv6 default route via
	peer     fakeLinkKey // veth only
	tapFlags string      // tuntap only
	tapFor   string      // tuntap only: the pod interface SetupTap joined it to
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

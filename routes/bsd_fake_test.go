package routes

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// fakeBSD is a recording bsdKernel that behaves like macOS's route(8) for
// the commands vmlane runs, and prints its table as `netstat -rn` does.
// Like Apple's route(8) (network_cmds, route.c), it exits 0 whatever
// happens: a failure is only the "route: writing to routing socket: …"
// line, and for add, change and delete the verb's line ending in the
// reason, on its output. Its status was never a failure signal on a Mac,
// which an earlier fake that exited 1 hid.
// connected are the on-link networks (next hops in
// them are directly reachable); routes are the table's gateway routes.
type fakeBSD struct {
	connected map[netip.Prefix]string // network -> interface
	routes    map[netip.Prefix]KernelRoute
	calls     []string
	failOn    string // a call prefix that fails
}

func newFakeBSD() *fakeBSD {
	f := &fakeBSD{
		connected: map[netip.Prefix]string{netip.MustParsePrefix("192.168.1.0/24"): "en0", netip.MustParsePrefix("fd00::/64"): "en0"},
		routes:    map[netip.Prefix]KernelRoute{},
	}
	f.routes[netip.MustParsePrefix("0.0.0.0/0")] = KernelRoute{Dst: netip.MustParsePrefix("0.0.0.0/0"), Via: netip.MustParseAddr("192.168.1.1"), Dev: "en0"}
	return f
}

// add puts a gateway route in the table as someone else would.
func (f *fakeBSD) add(dst, via string) {
	p := netip.MustParsePrefix(dst)
	f.routes[p] = KernelRoute{Dst: p, Via: netip.MustParseAddr(via), Dev: "en0"}
}

func (f *fakeBSD) Dump() ([]KernelRoute, error) {
	var out []KernelRoute
	for p, dev := range f.connected {
		out = append(out, KernelRoute{Dst: p, Dev: dev})
	}
	for _, r := range f.routes {
		out = append(out, r)
	}
	return out, nil
}

func (f *fakeBSD) Run(stdin string, argv ...string) (string, error) {
	call := strings.Join(argv, " ")
	f.calls = append(f.calls, call)
	fail := func(msg string) (string, error) {
		return msg + "\n", nil // exit status 0, as route(8)
	}
	if f.failOn != "" && strings.HasPrefix(call, f.failOn) {
		return fail("route: writing to routing socket: Network is unreachable")
	}
	if argv[0] != "route" {
		return fail("fake: unknown tool " + argv[0])
	}
	args := slices.DeleteFunc(slices.Clone(argv[2:]), func(s string) bool { return s == "-inet6" || s == "-net" })
	verb := args[0]
	if verb == "get" {
		return f.get(netip.MustParseAddr(args[1]))
	}
	dst, via := netip.MustParsePrefix(args[1]), netip.MustParseAddr(args[2])
	_, exists := f.routes[dst]
	what := fmt.Sprintf("%s net %s: gateway %s", verb, dst.Addr(), via)
	switch verb {
	case "add":
		if exists {
			return fail("route: writing to routing socket: File exists\n" + what + ": File exists")
		}
	case "change", "delete":
		if !exists {
			return fail("route: writing to routing socket: not in table\n" + what + ": not in table")
		}
	}
	if verb == "delete" {
		delete(f.routes, dst)
	} else {
		f.routes[dst] = KernelRoute{Dst: dst, Via: via, Dev: f.ifaceFor(via)}
	}
	return what + "\n", nil
}

func (f *fakeBSD) ifaceFor(a netip.Addr) string {
	for p, dev := range f.connected {
		if p.Contains(a) {
			return dev
		}
	}
	return "en0"
}

// get answers `route -n get IP` as macOS prints it, from the longest
// matching route.
func (f *fakeBSD) get(ip netip.Addr) (string, error) {
	best := KernelRoute{Dst: netip.Prefix{}}
	found := false
	consider := func(r KernelRoute) {
		if r.Dst.Addr().Is4() == ip.Is4() && r.Dst.Contains(ip) && (!found || r.Dst.Bits() > best.Dst.Bits()) {
			best, found = r, true
		}
	}
	for p, dev := range f.connected {
		consider(KernelRoute{Dst: p, Dev: dev})
	}
	for _, r := range f.routes {
		consider(r)
	}
	if !found {
		// route(8) exits 0 here too.
		return "route: writing to routing socket: not in table\n", nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "   route to: %s\ndestination: %s\n", ip, netstatDst(best.Dst))
	flags := "<UP,DONE,CLONING,STATIC>"
	if best.Via.IsValid() {
		fmt.Fprintf(&b, "    gateway: %s\n", best.Via)
		flags = "<UP,GATEWAY,DONE,STATIC,PRCLONING>"
	}
	fmt.Fprintf(&b, "  interface: %s\n      flags: %s\n", best.Dev, flags)
	b.WriteString(" recvpipe  sendpipe  ssthresh  rtt,msec    rttvar  hopcount      mtu     expire\n       0         0         0         0         0         0      1500         0\n")
	return b.String(), nil
}

// netstatDst abbreviates a destination as netstat -rn does: "default",
// and trailing octets beyond the mask left out ("10.244.1/24").
func netstatDst(p netip.Prefix) string {
	if p.Bits() == 0 {
		return "default"
	}
	if !p.Addr().Is4() {
		return p.String()
	}
	b := p.Addr().As4()
	n := (p.Bits() + 7) / 8
	parts := make([]string, n)
	for i := range n {
		parts[i] = fmt.Sprint(b[i])
	}
	return strings.Join(parts, ".") + fmt.Sprintf("/%d", p.Bits())
}

// String prints the table as `netstat -rn` does (Destination, Gateway,
// Flags, Netif), sorted by destination.
func (f *fakeBSD) String() string {
	type row struct {
		dst netip.Prefix
		s   string
	}
	var rows []row
	for p, dev := range f.connected {
		rows = append(rows, row{p, fmt.Sprintf("%-20s %-18s %-6s %s", netstatDst(p), "link#4", "UCS", dev)})
	}
	for _, r := range f.routes {
		rows = append(rows, row{r.Dst, fmt.Sprintf("%-20s %-18s %-6s %s", netstatDst(r.Dst), r.Via, "UGSc", r.Dev)})
	}
	slices.SortFunc(rows, func(a, b row) int { return comparePrefix(a.dst, b.dst) })
	var b strings.Builder
	fmt.Fprintf(&b, "%-20s %-18s %-6s %s\n", "Destination", "Gateway", "Flags", "Netif")
	for _, r := range rows {
		b.WriteString(r.s + "\n")
	}
	return b.String()
}

// fakeNAT is a recording NATBackend that prints the exemption it holds as
// the pf rules macOS's backend would load (pf.NoNATRules' syntax; the pf
// package's own golden tests pin that text).
type fakeNAT struct{ rules []string }

func (f *fakeNAT) Ensure(nat []NATOptions, full bool) error {
	var rules []string
	for _, o := range nat {
		af := "inet"
		if o.PodCIDR.Addr().Is6() {
			af = "inet6"
		}
		for _, c := range o.Cluster {
			rules = append(rules, fmt.Sprintf("no nat %s from %s to %s", af, o.PodCIDR, c))
		}
	}
	f.rules = rules
	return nil
}

func (f *fakeNAT) String() string {
	return "# pfctl -a com.apple/vmlane -s nat\n" + strings.Join(f.rules, "\n") + "\n"
}

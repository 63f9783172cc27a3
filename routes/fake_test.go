package routes

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"syscall"
)

// fakeTable is a recording routeTable whose state prints as `ip route`
// lines. gateways maps next hops to the gateway the kernel would use to
// reach them (absent: directly reachable).
type fakeTable struct {
	routes   map[netip.Prefix]KernelRoute
	gateways map[netip.Addr]netip.Addr
	// noRoute lists next hops the kernel has no route to at all.
	noRoute map[netip.Addr]bool
	calls   []string
	failOn  string // a call prefix that fails
}

func newFakeTable(lines ...string) *fakeTable {
	f := &fakeTable{routes: map[netip.Prefix]KernelRoute{}, gateways: map[netip.Addr]netip.Addr{}}
	for _, l := range lines {
		r := parseRouteLine(l)
		f.routes[r.Dst] = r
	}
	return f
}

// parseRouteLine reads "DST [via GW] [dev DEV] proto N".
func parseRouteLine(l string) KernelRoute {
	f := strings.Fields(l)
	if f[0] == "default" {
		f[0] = "0.0.0.0/0"
	}
	r := KernelRoute{Dst: netip.MustParsePrefix(f[0])}
	for i := 1; i+1 < len(f); i += 2 {
		switch f[i] {
		case "via":
			r.Via = netip.MustParseAddr(f[i+1])
		case "dev":
			r.Dev = f[i+1]
		case "proto":
			fmt.Sscan(f[i+1], &r.Proto)
		}
	}
	return r
}

func (f *fakeTable) List() ([]KernelRoute, error) {
	if f.failOn == "list" {
		return nil, fmt.Errorf("injected list failure")
	}
	out := make([]KernelRoute, 0, len(f.routes))
	for _, r := range f.routes {
		out = append(out, r)
	}
	return out, nil
}

func (f *fakeTable) Replace(dst netip.Prefix, via netip.Addr, proto int) error {
	call := fmt.Sprintf("replace %s via %s proto %d", dst, via, proto)
	f.calls = append(f.calls, call)
	if f.failOn != "" && strings.HasPrefix(call, f.failOn) {
		return fmt.Errorf("injected failure")
	}
	if f.noRoute[via] {
		return syscall.ENETUNREACH
	}
	if f.gateways[via].IsValid() {
		// As the kernel: a gateway must be on a connected subnet.
		return fmt.Errorf("Nexthop has invalid gateway")
	}
	f.routes[dst] = KernelRoute{Dst: dst, Via: via, Proto: proto}
	return nil
}

// ReplaceOnLink installs a tunnel route whatever via's reachability, as
// the kernel does with the onlink flag; onLinkUnsupported leaves it out,
// as on macOS.
func (f *fakeTable) ReplaceOnLink(dst netip.Prefix, via netip.Addr, dev string, proto int) error {
	call := fmt.Sprintf("replace %s via %s dev %s onlink proto %d", dst, via, dev, proto)
	f.calls = append(f.calls, call)
	if f.failOn != "" && strings.HasPrefix(call, f.failOn) {
		return fmt.Errorf("injected failure")
	}
	f.routes[dst] = KernelRoute{Dst: dst, Via: via, Dev: dev, Proto: proto}
	return nil
}

func (f *fakeTable) Delete(r KernelRoute) error {
	call := "del " + r.String()
	f.calls = append(f.calls, call)
	if f.failOn != "" && strings.HasPrefix(call, f.failOn) {
		return fmt.Errorf("injected failure")
	}
	// As the kernel deletes: a next hop or a protocol given must match
	// (a route that does not is not found, which the netlink table takes
	// for gone).
	if have, ok := f.routes[r.Dst]; ok && (r.Via.IsValid() && have.Via != r.Via || r.Proto != 0 && have.Proto != r.Proto) {
		return nil
	}
	delete(f.routes, r.Dst)
	return nil
}

// Get answers as `ip route get`: the gateway toward ip, or, for an
// address in noRoute, "network is unreachable".
func (f *fakeTable) Get(ip netip.Addr) (netip.Addr, error) {
	if f.noRoute[ip] {
		return netip.Addr{}, syscall.ENETUNREACH
	}
	return f.gateways[ip], nil
}

// String prints the table as sorted `ip route` lines.
func (f *fakeTable) String() string {
	var lines []string
	for _, r := range f.routes {
		lines = append(lines, r.String())
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// fakeIPT is a recording iptablesInterface whose chains print as
// `iptables -S` lines.
type fakeIPT struct {
	chains   map[string][]string // "table/chain" -> rules, each the joined rulespec
	restores int                 // Restore calls: execs of iptables-restore
}

func newFakeIPT() *fakeIPT {
	f := &fakeIPT{chains: map[string][]string{}}
	for _, c := range []string{"nat/POSTROUTING", "filter/FORWARD"} {
		f.chains[c] = nil
	}
	return f
}

func key(table, chain string) string { return table + "/" + chain }

func (f *fakeIPT) ChainExists(table, chain string) (bool, error) {
	_, ok := f.chains[key(table, chain)]
	return ok, nil
}
func (f *fakeIPT) NewChain(table, chain string) error {
	if _, ok := f.chains[key(table, chain)]; ok {
		return fmt.Errorf("chain %s exists", chain)
	}
	f.chains[key(table, chain)] = nil
	return nil
}
func (f *fakeIPT) ClearChain(table, chain string) error {
	f.chains[key(table, chain)] = []string{}
	return nil
}
func (f *fakeIPT) DeleteChain(table, chain string) error {
	if len(f.chains[key(table, chain)]) > 0 {
		return fmt.Errorf("chain %s not empty", chain)
	}
	delete(f.chains, key(table, chain))
	return nil
}
func (f *fakeIPT) Exists(table, chain string, spec ...string) (bool, error) {
	return slices.Contains(f.chains[key(table, chain)], strings.Join(spec, " ")), nil
}
func (f *fakeIPT) Insert(table, chain string, pos int, spec ...string) error {
	rules := f.chains[key(table, chain)]
	f.chains[key(table, chain)] = slices.Insert(rules, pos-1, strings.Join(spec, " "))
	return nil
}
func (f *fakeIPT) Append(table, chain string, spec ...string) error {
	f.chains[key(table, chain)] = append(f.chains[key(table, chain)], strings.Join(spec, " "))
	return nil
}
func (f *fakeIPT) Delete(table, chain string, spec ...string) error {
	rules := f.chains[key(table, chain)]
	i := slices.Index(rules, strings.Join(spec, " "))
	if i < 0 {
		return fmt.Errorf("no such rule")
	}
	f.chains[key(table, chain)] = slices.Delete(rules, i, i+1)
	return nil
}
func (f *fakeIPT) List(table, chain string) ([]string, error) {
	out := []string{"-N " + chain}
	for _, r := range f.chains[key(table, chain)] {
		out = append(out, "-A "+chain+" "+r)
	}
	return out, nil
}

// Restore applies iptables-restore --noflush input as the kernel does: a
// table's changes all at once at its COMMIT, a declared chain created or
// flushed, other chains untouched; a malformed input changes nothing.
func (f *fakeIPT) Restore(data []byte) error {
	f.restores++
	var table string
	var pending map[string][]string
	for i, line := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table, pending = line[1:], map[string][]string{}
		case line == "COMMIT":
			for k, rules := range pending {
				f.chains[k] = rules
			}
			pending = nil
		case strings.HasPrefix(line, ":") && pending != nil:
			name, _, _ := strings.Cut(line[1:], " ")
			pending[key(table, name)] = []string{}
		case strings.HasPrefix(line, "-A ") && pending != nil:
			args, err := splitRestore(line[3:])
			if err != nil {
				return fmt.Errorf("line %d: %w", i+1, err)
			}
			k := key(table, args[0])
			if _, ok := pending[k]; !ok {
				return fmt.Errorf("line %d: chain %s not declared (the fake supports only whole-chain replacement)", i+1, args[0])
			}
			pending[k] = append(pending[k], strings.Join(args[1:], " "))
		default:
			return fmt.Errorf("line %d: unexpected %q", i+1, line)
		}
	}
	if pending != nil {
		return errors.New("input ends without COMMIT")
	}
	return nil
}

// splitRestore splits a rule as iptables-restore does: on spaces outside
// double quotes, with \" and \\ inside them.
func splitRestore(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inQuote, have := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inQuote && c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
		case c == '"':
			inQuote, have = !inQuote, true
		case c == ' ' && !inQuote:
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(c)
			have = true
		}
	}
	if inQuote {
		return nil, errors.New("unterminated quote")
	}
	if have {
		out = append(out, cur.String())
	}
	return out, nil
}

// String prints every chain as `iptables -t TABLE -S` would, sorted by
// table and chain.
func (f *fakeIPT) String() string {
	keys := make([]string, 0, len(f.chains))
	for k := range f.chains {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		table, chain, _ := strings.Cut(k, "/")
		fmt.Fprintf(&b, "*%s -N %s\n", table, chain)
		for _, r := range f.chains[k] {
			fmt.Fprintf(&b, "*%s -A %s %s\n", table, chain, r)
		}
	}
	return b.String()
}

package routes

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/vmlane/vmlane/internal/atomicfile"
	"github.com/vmlane/vmlane/internal/command"
)

// DefaultBSDStatePath is where vmlaned keeps, on macOS, the set of routes
// it installed.
const DefaultBSDStatePath = "/var/db/vmlane/routes.json"

// commandRunner runs route(8) (command.Exec; a recording fake in the
// tests).
type commandRunner = command.Runner

// bsdKernel is the BSD (macOS) routing table as vmlane reaches it: a dump
// of the table (the PF_ROUTE sysctl NET_RT_DUMP, read with
// golang.org/x/net/route) and route(8) for changes and lookups.
type bsdKernel interface {
	commandRunner
	// Dump returns the unscoped unicast routes of both families, without
	// the ARP/NDP host entries the kernel clones; Proto is unset (BSD
	// routes carry no protocol).
	Dump() ([]KernelRoute, error)
}

// bsdTable is the macOS main routing table as a routeTable. BSD routes
// carry no protocol field, so ownership is a state file: the destinations
// vmlane installed, and the gateway it gave each. List marks a kernel
// route owned (Proto = proto) when its destination is claimed in the state
// file and it goes via a gateway, so Reconcile, Teardown and the sweep of
// stale routes at start work as on Linux, and nothing unclaimed is ever
// changed or deleted.
//
// The state file is written before a route is added (a crash between the
// two leaves a claim on a route that is not there, which the next List
// drops) and after one is deleted. It is not fsynced: routes added with
// route(8) do not outlive a reboot either, so a state file that a power
// loss cut short names routes that are gone anyway, and loadClaims treats
// it as empty.
type bsdTable struct {
	k      bsdKernel
	path   string
	proto  int
	claims map[netip.Prefix]netip.Addr
	kernel map[netip.Prefix]KernelRoute // from the last List
	gets   map[netip.Addr]getAnswer     // route -n get answers since the last List
}

// getAnswer is one `route -n get` result.
type getAnswer struct {
	gw  netip.Addr
	err error
}

// bsdState is the state file's format.
type bsdState struct {
	Version int           `json:"version"`
	Routes  []bsdStateRow `json:"routes"`
}

type bsdStateRow struct {
	Dst netip.Prefix `json:"dst"`
	Via netip.Addr   `json:"via"`
}

// newBSDTable opens the table with the state file at path. An unreadable
// or corrupt state file is returned as an error along with a table that
// claims nothing, so the daemon can warn and go on (it cannot know which
// routes were its own: it leaves them) and teardown can refuse.
func newBSDTable(k bsdKernel, path string, proto int) (*bsdTable, error) {
	t := &bsdTable{k: k, path: path, proto: proto, claims: map[netip.Prefix]netip.Addr{}}
	err := t.loadClaims()
	return t, err
}

func (t *bsdTable) loadClaims() error {
	data, err := os.ReadFile(t.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("route state %s: %w", t.path, err)
	}
	var st bsdState
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("route state %s: %w", t.path, err)
	}
	for _, r := range st.Routes {
		if r.Dst.IsValid() && r.Via.IsValid() {
			t.claims[r.Dst.Masked()] = r.Via
		}
	}
	return nil
}

// saveClaims writes the state file, or removes it when vmlane owns no
// route, so a torn-down node keeps nothing of vmlane's.
func (t *bsdTable) saveClaims() error {
	if len(t.claims) == 0 {
		if err := os.Remove(t.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	st := bsdState{Version: 1}
	for dst, via := range t.claims {
		st.Routes = append(st.Routes, bsdStateRow{Dst: dst, Via: via})
	}
	slices.SortFunc(st.Routes, func(a, b bsdStateRow) int { return comparePrefix(a.Dst, b.Dst) })
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(t.path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// fsynced with its folder: after a crash the file must still name
	// every route vmlaned added, or they are left behind unowned.
	return atomicfile.WriteFile(t.path, append(data, '\n'), 0o644)
}

// List dumps the kernel's table and marks the routes vmlane claims with
// t.proto: a route to a destination in the state file via the gateway the
// state file gives it. A route to a claimed destination via another
// gateway is someone else's (after a reboot the state file outlives the
// routes, and another agent may have installed the same destination
// first): it is left alone, and the claim is dropped.
func (t *bsdTable) List() ([]KernelRoute, error) {
	rs, err := t.k.Dump()
	if err != nil {
		return nil, fmt.Errorf("dumping the routing table: %w", err)
	}
	t.kernel = make(map[netip.Prefix]KernelRoute, len(rs))
	t.gets = map[netip.Addr]getAnswer{}
	out := make([]KernelRoute, 0, len(rs))
	present := map[netip.Prefix]bool{}
	for _, r := range rs {
		r.Proto = 0
		if via, ok := t.claims[r.Dst]; ok && r.Via.IsValid() && r.Via == via {
			r.Proto = t.proto
			present[r.Dst] = true
		}
		t.kernel[r.Dst] = r
		out = append(out, r)
	}
	// Claims on routes the kernel no longer has (a reboot, someone's
	// route delete) are dropped: Reconcile re-adds the wanted ones.
	stale := false
	for dst := range t.claims {
		if !present[dst] {
			delete(t.claims, dst)
			stale = true
		}
	}
	if stale {
		if err := t.saveClaims(); err != nil {
			return out, fmt.Errorf("saving route state: %w", err)
		}
	}
	return out, nil
}

// family is route(8)'s address family modifier for dst.
func familyArgs(dst netip.Prefix) []string {
	if dst.Addr().Is6() {
		return []string{"-inet6"}
	}
	return nil
}

// routeCmd is `route -n VERB [-inet6] -net DST GATEWAY`: -n keeps route(8)
// from resolving names (a hung DNS lookup would stall the reconcile).
func routeCmd(verb string, dst netip.Prefix, via netip.Addr) []string {
	argv := append([]string{"route", "-n", verb}, familyArgs(dst)...)
	return append(argv, "-net", dst.String(), via.String())
}

// routeFailed tells a failed route(8) call from a successful one. Apple's
// route(8) exits 0 whether the routing socket took the message or not; a
// failure shows only on its output ("route: writing to routing socket:
// File exists", and the verb's line ending in the reason). A failed exec
// (err) fails too.
func routeFailed(out string, err error) bool {
	return err != nil || strings.Contains(out, "writing to routing socket") ||
		strings.Contains(out, "File exists") || strings.Contains(out, "not in table")
}

// Replace installs dst via via: `route -n add`, or `route -n change` when
// the kernel has dst already (an owned route whose next hop moved). The
// next hop must be directly reachable, as the Linux kernel insists; BSD
// would accept a gateway it reaches through another gateway, and send pod
// traffic to a router that does not know pod subnets, so Replace checks
// with `route -n get` first and refuses.
func (t *bsdTable) Replace(dst netip.Prefix, via netip.Addr, proto int) error {
	gw, err := t.Get(via)
	if err != nil {
		return err
	}
	if gw.IsValid() {
		return fmt.Errorf("next hop %s is reached via %s, not directly", via, gw)
	}
	prev, had := t.claims[dst]
	if !had || prev != via {
		t.claims[dst] = via
		if err := t.saveClaims(); err != nil {
			t.unclaim(dst, prev, had)
			return fmt.Errorf("saving route state: %w", err)
		}
	}
	verb := "add"
	if _, ok := t.kernel[dst]; ok {
		verb = "change"
	}
	out, err := t.k.Run("", routeCmd(verb, dst, via)...)
	switch {
	case !routeFailed(out, err):
	case verb == "add" && strings.Contains(out, "File exists"):
		out, err = t.k.Run("", routeCmd("change", dst, via)...)
	case verb == "change" && strings.Contains(out, "not in table"):
		out, err = t.k.Run("", routeCmd("add", dst, via)...)
	}
	if routeFailed(out, err) {
		t.unclaim(dst, prev, had)
		t.saveClaims()
		return fmt.Errorf("route %s %s via %s: %s", verb, dst, via, routeError(out, err))
	}
	if t.kernel == nil {
		t.kernel = map[netip.Prefix]KernelRoute{}
	}
	t.kernel[dst] = KernelRoute{Dst: dst, Via: via, Proto: proto}
	return nil
}

func (t *bsdTable) unclaim(dst netip.Prefix, prev netip.Addr, had bool) {
	if had {
		t.claims[dst] = prev
	} else {
		delete(t.claims, dst)
	}
}

func routeError(out string, err error) string {
	if s := strings.TrimSpace(out); s != "" {
		return strings.Join(strings.Fields(s), " ")
	}
	if err != nil {
		return err.Error()
	}
	return "failed"
}

// Delete removes r, which must be one vmlane claims: `route -n delete`
// with the gateway the kernel has. A route already gone is no error.
func (t *bsdTable) Delete(r KernelRoute) error {
	if _, ok := t.claims[r.Dst]; !ok {
		return fmt.Errorf("route %s is not vmlane's (not in %s)", r.Dst, t.path)
	}
	via := r.Via
	if !via.IsValid() {
		via = t.claims[r.Dst]
	}
	out, err := t.k.Run("", routeCmd("delete", r.Dst, via)...)
	if routeFailed(out, err) && !strings.Contains(out, "not in table") {
		return fmt.Errorf("route delete %s: %s", r.Dst, routeError(out, err))
	}
	delete(t.claims, r.Dst)
	delete(t.kernel, r.Dst)
	return t.saveClaims()
}

// Get returns the gateway of the kernel's route to ip (`route -n get`),
// zero when ip is directly reachable. Answers are kept until the next
// List, so Reconcile's look-up after a refused Replace costs no second
// exec.
func (t *bsdTable) Get(ip netip.Addr) (netip.Addr, error) {
	if a, ok := t.gets[ip]; ok {
		return a.gw, a.err
	}
	gw, err := t.get(ip)
	if t.gets == nil {
		t.gets = map[netip.Addr]getAnswer{}
	}
	t.gets[ip] = getAnswer{gw, err}
	return gw, err
}

func (t *bsdTable) get(ip netip.Addr) (netip.Addr, error) {
	argv := []string{"route", "-n", "get"}
	if ip.Is6() {
		argv = append(argv, "-inet6")
	}
	out, err := t.k.Run("", append(argv, ip.String())...)
	if routeFailed(out, err) {
		if strings.Contains(out, "not in table") {
			// No route at all (no default route): as ENETUNREACH from
			// netlink on Linux, for Reconcile to count it unreachable.
			return netip.Addr{}, fmt.Errorf("route -n get %s: %w", ip, syscall.ENETUNREACH)
		}
		return netip.Addr{}, fmt.Errorf("route -n get %s: %s", ip, routeError(out, err))
	}
	gw, err := parseRouteGet(out)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("route -n get %s: %w", ip, err)
	}
	return gw, nil
}

// parseRouteGet reads `route -n get` output ("   route to: 10.0.0.7",
// "    gateway: 192.168.1.1", "      flags: <UP,GATEWAY,DONE,STATIC>"):
// the route's gateway when its flags have GATEWAY, zero otherwise. A
// directly reachable host's entry also has a "gateway:" line (its
// link-layer address), which the flags tell apart.
func parseRouteGet(out string) (netip.Addr, error) {
	fields := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		k = strings.TrimSpace(k)
		if _, seen := fields[k]; !seen {
			fields[k] = strings.TrimSpace(v)
		}
	}
	flags, ok := fields["flags"]
	if !ok {
		return netip.Addr{}, fmt.Errorf("no flags in %q", strings.TrimSpace(out))
	}
	isGW := false
	for _, f := range strings.FieldsFunc(strings.Trim(flags, "<>"), func(r rune) bool { return r == ',' }) {
		if f == "GATEWAY" {
			isGW = true
		}
	}
	if !isGW {
		return netip.Addr{}, nil
	}
	gw, err := netip.ParseAddr(strings.SplitN(fields["gateway"], "%", 2)[0])
	if err != nil {
		return netip.Addr{}, fmt.Errorf("gateway %q is not an address", fields["gateway"])
	}
	return gw.Unmap(), nil
}

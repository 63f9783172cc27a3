package routes

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, rewriting it under -update.
func golden(t *testing.T, name string, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s (-golden +got):\n%s", path, diff)
	}
}

func rt(dst, via, node string) Route {
	return Route{Dst: netip.MustParsePrefix(dst), Via: netip.MustParseAddr(via), Node: node}
}

func stateFile(t *testing.T, path string) string {
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return "(no state file)\n"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestDarwinRouteCommandsGolden drives the macOS table through Reconcile
// and Teardown against the recording fake: the route(8) commands for add,
// change, delete and the start-up sweep, the table as netstat prints it,
// and the state file, step by step.
func TestDarwinRouteCommandsGolden(t *testing.T) {
	state := filepath.Join(t.TempDir(), "routes.json")
	// vmlaned ran before: it owns 10.244.9.0/24 (a node removed while it
	// was down) and 10.244.1.0/24. 10.244.7.0/24 was added by hand.
	os.WriteFile(state, []byte(`{"version":1,"routes":[{"dst":"10.244.1.0/24","via":"192.168.1.11"},{"dst":"10.244.9.0/24","via":"192.168.1.19"},{"dst":"10.244.8.0/24","via":"192.168.1.18"}]}`), 0o644)
	k := newFakeBSD()
	k.add("10.244.1.0/24", "192.168.1.11")
	k.add("10.244.9.0/24", "192.168.1.19")
	k.add("10.244.7.0/24", "192.168.1.50")
	// 10.244.8.0/24 is claimed but gone (a reboot): the claim is dropped.

	var b strings.Builder
	var table *bsdTable
	step := func(name string, want []Route, teardown bool) {
		k.calls = nil
		var out Outcome
		var err error
		if teardown {
			var removed []KernelRoute
			removed, err = Teardown(table, nil, DefaultProtocol)
			out.Deleted = removed
		} else {
			out, err = Reconcile(table, want, DefaultProtocol)
		}
		fmt.Fprintf(&b, "## %s\n", name)
		for _, c := range k.calls {
			fmt.Fprintf(&b, "$ %s\n", c)
		}
		fmt.Fprintf(&b, "-> installed %d, deleted %d, unreachable %d, foreign %d, owned %d, err %v\n",
			len(out.Installed), len(out.Deleted), len(out.Unreachable), len(out.Foreign), out.Owned, err)
		fmt.Fprintf(&b, "%s# %s\n%s\n", k, filepath.Base(state), stateFile(t, state))
	}
	var err error
	if table, err = newBSDTable(k, state, DefaultProtocol); err != nil {
		t.Fatal(err)
	}
	want := []Route{
		rt("10.244.1.0/24", "192.168.1.11", "b"),
		rt("10.244.2.0/24", "192.168.1.12", "c"),
		rt("10.244.6.0/24", "10.0.0.7", "far"),   // behind the default gateway
		rt("10.244.7.0/24", "192.168.1.15", "e"), // held by a hand-made route
		rt("fd00:244:0:2::/64", "fd00::12", "c"),
	}
	step("start: sweep what vmlane left, add what is missing", want, false)
	step("nothing changed: no route(8) call but the unreachable next hop's check", want, false)
	want[0] = rt("10.244.1.0/24", "192.168.1.21", "b")
	step("node b moved: route change", want, false)
	delete(k.routes, netip.MustParsePrefix("10.244.2.0/24"))
	step("someone deleted a route of vmlane's: added back", want, false)
	step("node c left: route delete", []Route{want[0], want[2], want[3]}, false)
	if table, err = newBSDTable(k, state, DefaultProtocol); err != nil {
		t.Fatal(err)
	}
	step("restart: the state file says what is vmlane's; nothing to do", []Route{want[0], want[2], want[3]}, false)
	step("teardown: only vmlane's routes go", nil, true)
	golden(t, "darwin-routes.golden", b.String())
}

func TestDarwinReplaceFallsBack(t *testing.T) {
	state := filepath.Join(t.TempDir(), "routes.json")
	k := newFakeBSD()
	table, _ := newBSDTable(k, state, DefaultProtocol)
	table.List()
	// Someone adds the route between the dump and the add: add says
	// File exists, and change takes over.
	k.add("10.244.1.0/24", "192.168.1.99")
	if err := table.Replace(netip.MustParsePrefix("10.244.1.0/24"), netip.MustParseAddr("192.168.1.11"), DefaultProtocol); err != nil {
		t.Fatal(err)
	}
	// The route goes between the dump and a change: change says not in
	// table, and add takes over.
	delete(k.routes, netip.MustParsePrefix("10.244.1.0/24"))
	if err := table.Replace(netip.MustParsePrefix("10.244.1.0/24"), netip.MustParseAddr("192.168.1.12"), DefaultProtocol); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"route -n get 192.168.1.11",
		"route -n add -net 10.244.1.0/24 192.168.1.11",
		"route -n change -net 10.244.1.0/24 192.168.1.11",
		"route -n get 192.168.1.12",
		"route -n change -net 10.244.1.0/24 192.168.1.12",
		"route -n add -net 10.244.1.0/24 192.168.1.12",
	}
	if diff := cmp.Diff(want, k.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	// A failed add leaves no claim behind.
	k.failOn = "route -n add -net 10.244.3.0/24"
	if err := table.Replace(netip.MustParsePrefix("10.244.3.0/24"), netip.MustParseAddr("192.168.1.13"), DefaultProtocol); err == nil ||
		!strings.Contains(err.Error(), "Network is unreachable") {
		t.Fatalf("err = %v", err)
	}
	if _, ok := table.claims[netip.MustParsePrefix("10.244.3.0/24")]; ok || strings.Contains(stateFile(t, state), "10.244.3.0") {
		t.Error("a failed add left a claim")
	}
}

func TestDarwinCorruptStateOwnsNothing(t *testing.T) {
	state := filepath.Join(t.TempDir(), "routes.json")
	os.WriteFile(state, []byte("{\"version\":1,\"rou"), 0o644) // cut short by a power loss
	k := newFakeBSD()
	k.add("10.244.1.0/24", "192.168.1.11")
	table, err := newBSDTable(k, state, DefaultProtocol)
	if err == nil {
		t.Fatal("corrupt state accepted")
	}
	removed, err := Teardown(table, nil, DefaultProtocol)
	if err != nil || len(removed) != 0 || len(k.routes) != 2 {
		t.Errorf("Teardown with unknown ownership removed %v (err %v); want nothing", removed, err)
	}
	if err := table.Delete(KernelRoute{Dst: netip.MustParsePrefix("10.244.1.0/24")}); err == nil {
		t.Error("Delete of an unclaimed route accepted")
	}
}

func TestParseRouteGet(t *testing.T) {
	for _, tc := range []struct{ out, want string }{
		{"   route to: 192.168.1.11\ndestination: 192.168.1.0\n       mask: 255.255.255.0\n  interface: en0\n      flags: <UP,DONE,CLONING,STATIC>\n", ""},
		// A resolved neighbour: the gateway line is its MAC, not a hop.
		{"   route to: 192.168.1.11\ndestination: 192.168.1.11\n    gateway: a0:ce:c8:1:2:3\n  interface: en0\n      flags: <UP,HOST,DONE,LLINFO,WASCLONED,IFSCOPE,IFREF>\n", ""},
		{"   route to: 10.0.0.7\ndestination: default\n       mask: default\n    gateway: 192.168.1.1\n  interface: en0\n      flags: <UP,GATEWAY,DONE,STATIC,PRCLONING>\n", "192.168.1.1"},
		{"   route to: 2001:db8::7\ndestination: default\n    gateway: fe80::1%en0\n  interface: en0\n      flags: <UP,GATEWAY,DONE,STATIC,PRCLONING>\n", "fe80::1"},
	} {
		gw, err := parseRouteGet(tc.out)
		got := ""
		if gw.IsValid() {
			got = gw.String()
		}
		if err != nil || got != tc.want {
			t.Errorf("parseRouteGet(%q) = %q, %v; want %q", tc.out, got, err, tc.want)
		}
	}
	if _, err := parseRouteGet("route: writing to routing socket: not in table\n"); err == nil {
		t.Error("output without flags accepted")
	}
}

func FuzzParseRouteGet(f *testing.F) {
	f.Add("   route to: 10.0.0.7\ndestination: default\n    gateway: 192.168.1.1\n      flags: <UP,GATEWAY,DONE,STATIC>\n")
	f.Fuzz(func(t *testing.T, out string) { parseRouteGet(out) })
}

// A next hop with no route at all (a Mac without a default route) is
// unreachable, not a failed reconcile, and costs one route(8) call.
func TestDarwinNoRouteToNextHop(t *testing.T) {
	k := newFakeBSD()
	delete(k.routes, netip.MustParsePrefix("0.0.0.0/0"))
	table, _ := newBSDTable(k, filepath.Join(t.TempDir(), "routes.json"), DefaultProtocol)
	out, err := Reconcile(table, []Route{rt("10.244.6.0/24", "10.0.0.7", "far")}, DefaultProtocol)
	if err != nil || len(out.Unreachable) != 1 {
		t.Fatalf("Reconcile = %+v, %v; want the route unreachable", out, err)
	}
	if diff := cmp.Diff([]string{"route -n get 10.0.0.7"}, k.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

// TestDarwinClaimNeedsItsGateway: after a reboot the state file still
// claims 10.244.1.0/24 via node-b, but the kernel's route to it is another
// agent's, via another gateway. vmlane does not adopt it: the route is
// reported foreign and never changed or deleted, the stale claim goes,
// and teardown leaves it.
func TestDarwinClaimNeedsItsGateway(t *testing.T) {
	state := filepath.Join(t.TempDir(), "routes.json")
	if err := os.WriteFile(state, []byte(`{"version":1,"routes":[{"dst":"10.244.1.0/24","via":"192.168.1.12"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	k := newFakeBSD()
	k.add("10.244.1.0/24", "192.168.1.99") // someone else's, installed first
	table, err := newBSDTable(k, state, DefaultProtocol)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Reconcile(table, []Route{rt("10.244.1.0/24", "192.168.1.12", "node-b")}, DefaultProtocol)
	if err != nil || len(out.Foreign) != 1 || len(out.Installed) != 0 {
		t.Fatalf("Reconcile = %+v, %v; want the route reported foreign, nothing installed", out, err)
	}
	if got := k.routes[netip.MustParsePrefix("10.244.1.0/24")].Via.String(); got != "192.168.1.99" {
		t.Errorf("the other agent's route now goes via %s", got)
	}
	if _, ok := table.claims[netip.MustParsePrefix("10.244.1.0/24")]; ok || strings.Contains(stateFile(t, state), "10.244.1.0") {
		t.Error("the stale claim on another agent's route stayed")
	}
	if removed, err := Teardown(table, nil, DefaultProtocol); err != nil || len(removed) != 0 {
		t.Errorf("Teardown removed %v (%v); want nothing", removed, err)
	}
}

// TestDarwinStateFolderMade: the route state file makes its folder
// (/var/db/vmlane on a fresh Mac) before its first write.
func TestDarwinStateFolderMade(t *testing.T) {
	state := filepath.Join(t.TempDir(), "var", "db", "vmlane", "routes.json")
	table, err := newBSDTable(newFakeBSD(), state, DefaultProtocol)
	if err != nil {
		t.Fatal(err)
	}
	table.List()
	if err := table.Replace(netip.MustParsePrefix("10.244.1.0/24"), netip.MustParseAddr("192.168.1.11"), DefaultProtocol); err != nil {
		t.Fatalf("first route on a fresh Mac: %v", err)
	}
	if !strings.Contains(stateFile(t, state), "10.244.1.0/24") {
		t.Error("no state written")
	}
}

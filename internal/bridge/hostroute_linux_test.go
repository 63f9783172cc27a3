package bridge

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/privtest"
)

// bridgeNS is a namespace with the bridge vmlane0 (Ensure), which it
// deletes when tb ends.
func bridgeNS(tb testing.TB) *netnstest.NS {
	tb.Helper()
	privtest.Require(tb, "ip")
	n := netnstest.New(tb, "br")
	err := n.Do(func() error {
		_, err := Ensure("vmlane0", netip.MustParsePrefix("10.244.1.1/24"), 1500, "02:76:00:00:00:01")
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// TestHostRoutes: RouteHost adds a scope-link route of protocol 78 onto the
// bridge, HostRoutes lists exactly those (not another protocol's, not
// another link's), UnrouteHost removes one and is quiet about one that is
// gone, and a bridge that does not exist has none.
func TestHostRoutes(t *testing.T) {
	n := bridgeNS(t)
	n.MustRun(t, "ip", "link", "add", "other0", "type", "bridge")
	n.MustRun(t, "ip", "link", "set", "other0", "up")
	n.MustRun(t, "ip", "route", "add", "10.244.0.9/32", "dev", "vmlane0", "proto", "77")
	n.MustRun(t, "ip", "route", "add", "10.244.0.8/32", "dev", "other0", "proto", "78")
	v4, v6 := netip.MustParsePrefix("10.244.0.5/32"), netip.MustParsePrefix("fd00:10:244::5/128")
	var got []netip.Prefix
	var err error
	err = n.Do(func() error {
		for _, p := range []netip.Prefix{v4, v6} {
			if err := RouteHost("vmlane0", p); err != nil {
				return err
			}
		}
		if err := RouteHost("vmlane0", v4); err != nil { // again: a replace
			return err
		}
		got, err = HostRoutes("vmlane0")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, netip.Prefix.Compare)
	if want := []netip.Prefix{v4, v6}; !slices.Equal(got, want) {
		t.Errorf("HostRoutes %v, want %v", got, want)
	}
	if out := n.MustRun(t, "ip", "route", "show", "10.244.0.5"); !strings.Contains(out, "dev vmlane0 proto 78 scope link") {
		t.Errorf("route %q, want it on vmlane0, proto 78, scope link", out)
	}
	err = n.Do(func() error {
		if err := UnrouteHost("vmlane0", v4); err != nil {
			return err
		}
		if err := UnrouteHost("vmlane0", v4); err != nil {
			t.Errorf("UnrouteHost of a route that is gone: %v", err)
		}
		if err := UnrouteHost("missing0", v4); err != nil {
			t.Errorf("UnrouteHost on a bridge that is gone: %v", err)
		}
		if rs, err := HostRoutes("missing0"); err != nil || rs != nil {
			t.Errorf("HostRoutes of a bridge that is gone: %v, %v", rs, err)
		}
		got, err = HostRoutes("vmlane0")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []netip.Prefix{v6}; !slices.Equal(got, want) {
		t.Errorf("HostRoutes after UnrouteHost %v, want %v", got, want)
	}
}

// BenchmarkHostRoutes: HostRoutes on a node whose table has a route per
// Node and moved VM besides (15,000 of another protocol on another link,
// as at 5,000 Nodes), the kernel filtering the dump, against the same
// list filtered here (every route sent, parsed and dropped), as before, in
// the same run.
func BenchmarkHostRoutes(b *testing.B) {
	n := bridgeNS(b)
	n.MustRun(b, "ip", "link", "add", "eth9", "type", "bridge")
	n.MustRun(b, "ip", "link", "set", "eth9", "up")
	n.MustRun(b, "ip", "addr", "add", "192.168.0.2/16", "dev", "eth9")
	var batch strings.Builder
	for i := range 15000 {
		fmt.Fprintf(&batch, "route add 10.%d.%d.0/24 via 192.168.0.1 proto 77\n", 100+i/256, i%256)
	}
	for i := range 5 {
		fmt.Fprintf(&batch, "route add 10.244.0.%d/32 dev vmlane0 proto 78 scope link\n", 10+i)
	}
	cmd := n.Command("ip", "-batch", "-")
	cmd.Stdin = strings.NewReader(batch.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("ip -batch: %v\n%s", err, out)
	}
	run := func(b *testing.B, list func() (int, error)) {
		err := n.Do(func() error {
			for b.Loop() {
				got, err := list()
				if err != nil {
					return err
				}
				if got != 5 {
					b.Fatalf("%d host routes, want 5", got)
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.Run("kernel-filtered", func(b *testing.B) {
		run(b, func() (int, error) { rs, err := HostRoutes("vmlane0"); return len(rs), err })
	})
	b.Run("filtered here (reference)", func(b *testing.B) {
		run(b, func() (int, error) {
			br, err := netlinksafe.LinkByName("vmlane0")
			if err != nil {
				return 0, err
			}
			rs, err := netlinksafe.RouteListFiltered(netlink.FAMILY_ALL,
				&netlink.Route{LinkIndex: br.Attrs().Index, Protocol: netlink.RouteProtocol(HostRouteProtocol), Table: unix.RT_TABLE_MAIN},
				netlink.RT_FILTER_OIF|netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
			return len(rs), err
		})
	})
}

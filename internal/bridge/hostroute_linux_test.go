package bridge

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/privtest"
)

// TestHostRoutes: RouteHost adds a scope-link route of protocol 78 onto the
// bridge, HostRoutes lists exactly those (not another protocol's, not
// another link's), UnrouteHost removes one and is quiet about one that is
// gone, and a bridge that does not exist has none.
func TestHostRoutes(t *testing.T) {
	privtest.Require(t, "ip")
	n := netnstest.New(t, "br")
	err := n.Do(func() error {
		_, err := Ensure("vmlane0", netip.MustParsePrefix("10.244.1.1/24"), 1500, "02:76:00:00:00:01")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	n.MustRun(t, "ip", "link", "add", "other0", "type", "bridge")
	n.MustRun(t, "ip", "link", "set", "other0", "up")
	n.MustRun(t, "ip", "route", "add", "10.244.0.9/32", "dev", "vmlane0", "proto", "77")
	n.MustRun(t, "ip", "route", "add", "10.244.0.8/32", "dev", "other0", "proto", "78")
	v4, v6 := netip.MustParsePrefix("10.244.0.5/32"), netip.MustParsePrefix("fd00:10:244::5/128")
	var got []netip.Prefix
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

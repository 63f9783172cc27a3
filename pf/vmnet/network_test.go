package vmnet_test

import (
	"errors"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vmlane/vmlane/internal/testing/vmnetfake"
	"github.com/vmlane/vmlane/pf"
	// A dot import, as Go's review comments allow for an external test
	// that cannot be in the package: vmnetfake imports vmnet.
	. "github.com/vmlane/vmlane/pf/vmnet"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, rewriting it under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
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

func dualStack() Spec {
	return Spec{
		Subnet: netip.MustParsePrefix("10.244.5.0/24"),
		IPv6:   netip.MustParsePrefix("fd00:10:244:5::/64"),
		MTU:    1500,
		Reservations: []pf.Reservation{
			{MAC: "02:00:0a:f4:05:07", IP: netip.MustParseAddr("10.244.5.7")},
			{MAC: "02:00:0a:f4:05:09", IP: netip.MustParseAddr("10.244.5.9")},
		},
	}
}

// TestCreateGolden records Create's calls into vmnet for each path:
// the order vmnet needs (every setting, then the network, then the
// read-back and the serialization), each failure's status and what is
// released after it.
func TestCreateGolden(t *testing.T) {
	v4 := Spec{Subnet: netip.MustParsePrefix("10.244.5.0/24")}
	noNAT := v4
	noNAT.DisableNAT44, noNAT.DisableNAT66 = true, true
	for _, tc := range []struct {
		name   string
		spec   Spec
		fail   map[string]Status
		subnet netip.Prefix // what vmnet reports it took
		ipv6   netip.Prefix
		is     error
	}{
		{name: "dual-stack", spec: dualStack(), fail: map[string]Status{"vmnet_network_configuration_add_dhcp_reservation/10.244.5.9": InvalidArgument}},
		{name: "nat-off", spec: noNAT},
		{name: "first-host-refused", spec: v4, fail: map[string]Status{"vmnet_network_configuration_set_ipv4_subnet/first-host": InvalidArgument}},
		{name: "configuration-create-fails", spec: v4, fail: map[string]Status{"vmnet_network_configuration_create": NotAuthorized}, is: NotAuthorized},
		{name: "set-subnet-fails", spec: v4, fail: map[string]Status{"vmnet_network_configuration_set_ipv4_subnet": Failure}, is: Failure},
		{name: "set-ipv6-fails", spec: dualStack(), fail: map[string]Status{"vmnet_network_configuration_set_ipv6_prefix": InvalidArgument}, is: InvalidArgument},
		{name: "set-mtu-fails", spec: dualStack(), fail: map[string]Status{"vmnet_network_configuration_set_mtu": InvalidArgument}, is: InvalidArgument},
		{name: "overlap", spec: v4, fail: map[string]Status{"vmnet_network_create": Failure}, is: ErrCreate},
		{name: "readback-ipv4-elsewhere", spec: dualStack(), subnet: netip.MustParsePrefix("192.168.64.0/24")},
		{name: "readback-ipv6-elsewhere", spec: dualStack(), ipv6: netip.MustParsePrefix("fd9b:5a14:ba57:e3d3::/64")},
		{name: "serialization-fails", spec: v4, fail: map[string]Status{"vmnet_network_copy_serialization": MemFailure}, is: MemFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := vmnetfake.New()
			for k, v := range tc.fail {
				f.Fail[k] = v
			}
			f.Subnet, f.IPv6 = tc.subnet, tc.ipv6
			h, err := Create(f, tc.spec)
			out := f.Transcript()
			switch {
			case err != nil:
				out += "# error: " + err.Error() + "\n"
				if held := f.Held(); len(held) != 0 {
					t.Errorf("after a failure, still held: %v", held)
				}
				var mm *MismatchError
				if tc.is != nil && !errors.Is(err, tc.is) {
					t.Errorf("error %v is not %v", err, tc.is)
				}
				if tc.is == nil && !errors.As(err, &mm) {
					t.Errorf("error %v: want a *MismatchError", err)
				}
			case tc.is != nil || tc.subnet.IsValid() || tc.ipv6.IsValid():
				t.Fatalf("Create succeeded, want an error")
			default:
				out += "# served: " + h.Subnet.String()
				if h.IPv6.IsValid() {
					out += " " + h.IPv6.String()
				}
				out += "\n"
				for _, p := range h.Problems {
					out += "# problem: " + p + "\n"
				}
				h.Release(f)
				if held := f.Held(); len(held) != 0 {
					t.Errorf("after Release, still held: %v", held)
				}
			}
			golden(t, "create-"+tc.name+".golden", out)
		})
	}
}

func TestSpecFrom(t *testing.T) {
	good := pf.Network{Version: 1, Mode: "shared", Subnet: netip.MustParsePrefix("10.244.5.0/24"), MTU: 1500,
		IPv6Prefix: netip.MustParsePrefix("fd00:10:244:5::/64")}
	s, err := SpecFrom(good, Options{DisableNAT44: true})
	if err != nil {
		t.Fatal(err)
	}
	if s.Subnet != good.Subnet || s.IPv6 != good.IPv6Prefix || s.MTU != 1500 || !s.DisableNAT44 || s.DisableNAT66 {
		t.Errorf("SpecFrom = %+v", s)
	}
	if s.Gateway() != netip.MustParseAddr("10.244.5.1") {
		t.Errorf("gateway %s", s.Gateway())
	}
	for _, tc := range []struct {
		edit func(*pf.Network)
		want string
	}{
		{func(n *pf.Network) { n.Version = 2 }, "version 2"},
		{func(n *pf.Network) { n.Mode = "host" }, `mode "host"`},
		{func(n *pf.Network) { n.Subnet = netip.MustParsePrefix("10.244.5.1/24") }, "subnet"},
		{func(n *pf.Network) { n.Subnet = netip.MustParsePrefix("fd00::/64") }, "subnet"},
		{func(n *pf.Network) { n.IPv6Prefix = netip.MustParsePrefix("fd00:1::/96") }, "ipv6Prefix fd00:1::/96"},
		{func(n *pf.Network) { n.IPv6Prefix = netip.MustParsePrefix("10.0.0.0/8") }, "ipv6Prefix 10.0.0.0/8"},
		{func(n *pf.Network) { n.MTU = 100 }, "mtu 100"},
	} {
		n := good
		tc.edit(&n)
		if _, err := SpecFrom(n, Options{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SpecFrom(%+v) = %v, want an error naming %q", n, err, tc.want)
		}
	}
}

func TestBridgeAndOverlap(t *testing.T) {
	ifaces := []pf.Iface{
		{Name: "en0", Addrs: []netip.Prefix{netip.MustParsePrefix("192.168.1.20/24")}},
		{Name: "utun4", Addrs: []netip.Prefix{netip.MustParsePrefix("10.244.0.9/16")}},
		{Name: "bridge101", Addrs: []netip.Prefix{netip.MustParsePrefix("10.244.5.1/24")}},
	}
	if got := BridgeOf(ifaces, netip.MustParseAddr("10.244.5.1")); got != "bridge101" {
		t.Errorf("BridgeOf = %q", got)
	}
	if got := BridgeOf(ifaces, netip.MustParseAddr("10.244.6.1")); got != "" {
		t.Errorf("BridgeOf = %q, want none", got)
	}
	got := Overlapping(ifaces, netip.MustParsePrefix("10.244.5.0/24"))
	if diff := cmp.Diff([]string{"utun4 10.244.0.9/16", "bridge101 10.244.5.1/24"}, got); diff != "" {
		t.Error(diff)
	}
}

package main

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/vmlane/vmlane/internal/antispoof"
	"github.com/vmlane/vmlane/internal/netnstest"
	"github.com/vmlane/vmlane/internal/privtest"
	"github.com/vmlane/vmlane/leases"
	"github.com/vmlane/vmlane/plugin"
)

// TestAntiSpoofFollowsLeases: vmlaned keeps the anti-spoofing table in
// step with the lease file. The plugin's ADD puts a VM's port in; when
// the table is removed or a rule of it deleted by hand, vmlaned writes it
// again with the port; when the lease goes (a DEL whose Unguard was lost),
// vmlaned takes the port out.
func TestAntiSpoofFollowsLeases(t *testing.T) {
	privtest.Require(t, "ip", "iptables")
	bin := buildBinaries(t)
	node := netnstest.New(t, "node")
	d := startStandalone(t, bin, node, "10.250.31.0/24", "--anti-spoof-period", "200ms")
	tb := antispoof.Table{NetNS: node.Path}
	tap, ip := d.cniAdd(t, netnstest.New(t, "pod"), "vm1", "vm-one")
	port := plugin.HostVethName(leases.Key{ContainerID: "vm1", IfName: "eth0"})
	want := fmt.Sprintf("%s %s %s", port, tap.Mac, ip)
	holds := func(want string) func() (bool, string) {
		return func() (bool, string) {
			ps, err := tb.Ports()
			if err != nil {
				return false, err.Error()
			}
			var got []string
			for _, p := range ps {
				got = append(got, p.String())
			}
			if verr := tb.Verify(); verr != nil {
				return false, "table damaged: " + verr.Error()
			}
			return strings.Join(got, ",") == want, fmt.Sprintf("ports %q, want %q", got, want)
		}
	}
	eventually(t, "the VM's port checked after ADD", holds(want))

	if err := tb.Delete(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the table back with the port after it was deleted", holds(want))
	d.waitLog(t, "the repair", func(l string) bool { return strings.Contains(l, "anti-spoofing table was changed or removed") })

	s, err := leases.Open(d.leaseFile, netip.MustParsePrefix("10.250.31.0/24"), netip.MustParseAddr("10.250.31.1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Release(leases.Key{ContainerID: "vm1", IfName: "eth0"}); err != nil || !ok {
		t.Fatalf("releasing the lease: %v %v", ok, err)
	}
	eventually(t, "the port gone with its lease", holds(""))
}

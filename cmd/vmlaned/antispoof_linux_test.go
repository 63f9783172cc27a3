package main

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables"

	"github.com/vmlane/vmlane/internal/antispoof"
	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/privtest"
	"github.com/vmlane/vmlane/leases"
	"github.com/vmlane/vmlane/plugin"
)

// TestAntiSpoofFollowsLeases: vmlaned keeps the anti-spoofing table in
// step with the lease file. The plugin's ADD puts a VM's port in; when
// the table is removed or a rule of it deleted by hand, vmlaned writes it
// again with the port; when the lease goes (DEL leaves the entry to
// vmlaned), vmlaned takes the port out.
func TestAntiSpoofFollowsLeases(t *testing.T) {
	privtest.Require(t, "ip", "iptables")
	bin := buildBinaries(t)
	node := netnstest.New(t, "node")
	d := startStandalone(t, bin, node, "10.250.31.0/24", "--anti-spoof-period", "200ms")
	tb := antispoof.Table{NetNS: node.Path}
	tap, ip := d.cniAdd(t, netnstest.New(t, "pod"), "vm1", "vm-one")
	port := plugin.HostVethName(leases.Key{ContainerID: "vm1", IfName: "eth0"})
	want := fmt.Sprintf("%s %s %s", port, tap.Mac, ip)
	holds := func(want string) func() (bool, string) { return tableHolds(tb, want) }
	eventually(t, "the VM's port checked after ADD", holds(want))

	if err := tb.Delete(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the table back with the port after it was deleted", holds(want))
	d.waitLog(t, "the repair", func(l string) bool { return strings.Contains(l, "anti-spoofing table was changed or removed") })
	eventually(t, "the port's ingress chain back with the table", hasChain(node, port, true))

	// The bridge's no_linklocal_learn, turned off by hand, comes back.
	node.MustRun(t, "ip", "link", "set", "vmlane0", "type", "bridge", "no_linklocal_learn", "0")
	d.waitLog(t, "the bridge option's repair", func(l string) bool { return strings.Contains(l, "no_linklocal_learn was off") })
	if out := node.MustRun(t, "ip", "-d", "link", "show", "vmlane0"); !strings.Contains(out, "no_linklocal_learn 1") {
		t.Errorf("bridge after the repair:\n%s", out)
	}

	s, err := leases.Open(d.leaseFile, netip.MustParsePrefix("10.250.31.0/24"), netip.MustParseAddr("10.250.31.1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Release(leases.Key{ContainerID: "vm1", IfName: "eth0"}); err != nil || !ok {
		t.Fatalf("releasing the lease: %v %v", ok, err)
	}
	eventually(t, "the port gone with its lease", holds(""))
	eventually(t, "the port's ingress chain gone with its lease", hasChain(node, port, false))
}

// hasChain is a condition for eventually: the netdev table vmlane has (or,
// want false, has not) a chain for port.
func hasChain(node *netnstest.NS, port string, want bool) func() (bool, string) {
	return func() (bool, string) {
		var names []string
		err := node.Do(func() error {
			c, err := nftables.New()
			if err != nil {
				return err
			}
			chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyNetdev)
			for _, ch := range chains {
				names = append(names, ch.Table.Name+"/"+ch.Name)
			}
			return err
		})
		if err != nil {
			return false, err.Error()
		}
		return slices.Contains(names, antispoof.TableName+"/"+port) == want, fmt.Sprintf("netdev chains %q", names)
	}
}

// TestAntiSpoofBackfillsLeasesFromBefore: a pod attached by a plugin from
// before anti-spoofing has a lease naming no bridge port and no entry in
// the table. When vmlaned (with --anti-spoof, the default) starts, it
// names the port in the lease, since the attachment's host veth is on the
// bridge, and the port is checked from then on.
func TestAntiSpoofBackfillsLeasesFromBefore(t *testing.T) {
	privtest.Require(t, "ip", "iptables")
	bin := buildBinaries(t)
	node := netnstest.New(t, "node")
	d := startStandalone(t, bin, node, "10.250.33.0/24", "--anti-spoof-period", "200ms")
	tb := antispoof.Table{NetNS: node.Path}
	tap, ip := d.cniAdd(t, netnstest.New(t, "pod"), "old1", "vm-old")
	port := plugin.HostVethName(leases.Key{ContainerID: "old1", IfName: "eth0"})

	// As the older plugin left things: no bridgePort, no table.
	d.kill()
	raw, err := os.ReadFile(d.leaseFile)
	if err != nil {
		t.Fatal(err)
	}
	old := strings.Replace(string(raw), `"bridgePort":"`+port+`",`, "", 1)
	if old == string(raw) {
		t.Fatalf("lease file has no bridgePort %s to remove:\n%s", port, raw)
	}
	if err := os.WriteFile(d.leaseFile, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := tb.Delete(); err != nil {
		t.Fatal(err)
	}

	d.start(t)
	want := fmt.Sprintf("%s %s %s", port, tap.Mac, ip)
	eventually(t, "the old pod's port checked after the restart", tableHolds(tb, want))
	eventually(t, "the old pod's port's ingress chain after the restart", hasChain(node, port, true))
	snap, err := leases.Read(d.leaseFile)
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := snap.ByMAC(tap.Mac); !ok || l.BridgePort != port {
		t.Errorf("lease after the restart: %+v, want bridgePort %s", l, port)
	}
}

// tableHolds is a condition for eventually: the table is whole and holds
// exactly the ports want lists ("NAME MAC IP", comma-separated).
func tableHolds(tb antispoof.Table, want string) func() (bool, string) {
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

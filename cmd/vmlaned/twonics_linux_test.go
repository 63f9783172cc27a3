package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmlane/vmlane/internal/antispoof"
	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/testvm"
	"github.com/vmlane/vmlane/leases"
	"github.com/vmlane/vmlane/plugin"
)

// TestVMTwoNICsByDHCP is a VM on two vmlane networks, as Multus attaches
// them (pod interfaces net1 and net2; see plugin.TestMultusTwoNICs for
// Multus's calls): one node, two bridges, each network with its own
// vmlaned (bridge, subnet, lease file, DHCP server, anti-spoofing table).
// A QEMU guest with a NIC on each TAP gets each network's reserved address
// by DHCP and pings both gateways; each vmlaned keeps its own network's
// port in its own table, several sync periods on, and a DEL of one
// attachment leaves the other's lease bound.
func TestVMTwoNICsByDHCP(t *testing.T) {
	g := testvm.Need(t, "ip", "iptables", "nsenter")
	bin := buildBinaries(t)
	node := netnstest.New(t, "node")
	red := startStandalone(t, bin, node, "10.250.50.0/24", "--bridge", "vmlred", "--anti-spoof-period", "200ms")
	blue := startStandalone(t, bin, node, "10.250.51.0/24", "--bridge", "vmlblue", "--anti-spoof-period", "200ms",
		"--health-addr", "127.0.0.1:19475", "--metrics-addr", "127.0.0.1:19474")
	pod := netnstest.New(t, "pod")
	r1 := red.cniAddIf(t, pod, "vm2", "vm-two", "net1")
	r2 := blue.cniAddIf(t, pod, "vm2", "vm-two", "net2")
	tap1, tap2 := r1.Interfaces[len(r1.Interfaces)-1], r2.Interfaces[len(r2.Interfaces)-1]
	ip1, ip2 := r1.IPs[0].Address.IP.String(), r2.IPs[0].Address.IP.String()
	if tap1.Name != "tap1" || tap2.Name != "tap2" {
		t.Fatalf("TAPs %s and %s, want tap1 and tap2", tap1.Name, tap2.Name)
	}

	vm, err := g.Run(t.Context(), testvm.Config{
		NetNS: pod.Path, Tap: tap1.Name, MAC: tap1.Mac, Mode: testvm.ModeDHCP,
		More: []testvm.NIC{{Tap: tap2.Name, MAC: tap2.Mac}},
		Ping: []string{"10.250.50.1", "10.250.51.1"}, Timeout: 3 * time.Minute,
	})
	if err != nil {
		t.Fatalf("guest: %v", err)
	}
	got := map[string]string{} // MAC → address the guest got on that NIC
	for _, n := range vm.Nets {
		if l := vm.Leases[n.Iface]; l != nil {
			got[n.MAC] = l.IP.String()
		}
	}
	if got[tap1.Mac] != ip1 || got[tap2.Mac] != ip2 || len(got) != 2 {
		t.Errorf("the guest's NICs got %v; want %s on %s and %s on %s\n%s", got, ip1, tap1.Mac, ip2, tap2.Mac, vm.Console)
	}
	for _, gw := range []string{"10.250.50.1", "10.250.51.1"} {
		if p, ok := vm.Ping(gw); !ok || !p.OK {
			t.Errorf("guest could not ping %s: %+v", gw, p)
		}
	}
	for _, d := range []*standalone{red, blue} {
		if l, ok := leaseOf(t, d, "vm2"); !ok || l.State != leases.StateBound {
			t.Errorf("%s: lease %+v (found %v), want bound", d.leaseFile, l, ok)
		}
	}

	// The guest's run took many sync periods: each table still holds its
	// network's port, and only that.
	for _, n := range []struct {
		bridge string
		d      *standalone
	}{{"vmlred", red}, {"vmlblue", blue}} {
		l, _ := leaseOf(t, n.d, "vm2")
		ports, err := antispoof.Table{NetNS: node.Path, Name: plugin.AntiSpoofTable(n.bridge)}.Ports()
		names := make([]string, len(ports))
		for i, p := range ports {
			names[i] = p.Name
		}
		if err != nil || !slices.Equal(names, []string{l.BridgePort}) {
			t.Errorf("table %s holds ports %v (%v), want [%s]", plugin.AntiSpoofTable(n.bridge), names, err, l.BridgePort)
		}
	}

	red.cniDel(t, pod, "vm2", "net1")
	if links := pod.MustRun(t, "ip", "-o", "link", "show"); strings.Contains(links, "tap1:") || !strings.Contains(links, "tap2:") {
		t.Errorf("after DEL net1, the pod has:\n%s", links)
	}
	if l, ok := leaseOf(t, blue, "vm2"); !ok || l.State != leases.StateBound {
		t.Errorf("net2's lease after DEL net1: %+v (found %v), want bound", l, ok)
	}
}

// leaseOf is d's lease of the container id.
func leaseOf(t *testing.T, d *standalone, id string) (leases.Lease, bool) {
	t.Helper()
	snap, err := leases.Read(d.leaseFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range snap.Leases() {
		if l.ContainerID == id {
			return l, true
		}
	}
	return leases.Lease{}, false
}

package main

import (
	"testing"
	"time"

	"github.com/vmlane/vmlane/internal/netnstest"
	"github.com/vmlane/vmlane/internal/testvm"
	"github.com/vmlane/vmlane/leases"
)

// TestVMGetsReservedAddressByDHCP is the whole Linux node path on one node:
// vmlaned (standalone) makes the bridge, the conflists and the DHCP server;
// the CNI plugin, run with vmlaned's VM conflist the way a runtime runs it,
// reserves an address and makes the TAP; a real QEMU guest on that TAP with
// the result's MAC asks for DHCP, gets exactly the reserved address with
// the MTU, DNS and routes, and pings its gateway; the lease turns bound.
func TestVMGetsReservedAddressByDHCP(t *testing.T) {
	g := testvm.Need(t, "ip", "iptables", "nsenter")
	bin := buildBinaries(t)
	d := startStandalone(t, bin, netnstest.New(t, "node"), "10.250.30.0/24", "--mtu", "1400", "--dns", "10.96.0.10",
		"--search", "default.svc.cluster.local", "--domain", "cluster.local")
	pod := netnstest.New(t, "pod")
	tap, reserved := d.cniAdd(t, pod, "vm1", "vm-one")

	vm, err := g.Run(t.Context(), testvm.Config{
		NetNS: pod.Path, Tap: tap.Name, MAC: tap.Mac, Mode: testvm.ModeDHCP, Timeout: 3 * time.Minute,
	})
	if err != nil {
		t.Fatalf("guest: %v", err)
	}
	l := vm.DHCP
	if l == nil {
		t.Fatalf("guest got no DHCP lease: %+v", vm)
	}
	if l.IP.String() != reserved || l.Bits != 24 || l.MTU != 1400 || l.Hostname != "vm-one" || l.Domain != "cluster.local" ||
		len(l.DNS) != 1 || l.DNS[0].String() != "10.96.0.10" || len(l.Search) != 1 || l.ServerID.String() != "10.250.30.1" {
		t.Errorf("guest's lease %+v; want %s/24, MTU 1400, hostname vm-one, DNS 10.96.0.10, search and domain, server 10.250.30.1", l, reserved)
	}
	if n := len(l.Routes); n == 0 || l.Routes[n-1].Dst.String() != "0.0.0.0/0" {
		t.Errorf("option 121 routes %+v: want the default route last", l.Routes)
	}
	if len(vm.Pings) == 0 || !vm.Pings[0].OK {
		t.Errorf("guest could not ping its gateway: %+v", vm.Pings)
	}
	snap, err := leases.Read(d.leaseFile)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := snap.ByMAC(tap.Mac); !ok || got.State != leases.StateBound || got.IP.String() != reserved {
		t.Errorf("lease after DHCP: %+v (found %v), want bound to %s", got, ok, reserved)
	}
}

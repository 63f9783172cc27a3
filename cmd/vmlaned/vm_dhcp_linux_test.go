package main

import (
	"net/netip"
	"testing"
	"time"

	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/testvm"
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

// TestVMGetsBothAddresses is TestVMGetsReservedAddressByDHCP on a
// dual-stack node: the guest, running udhcpc and udhcpc6 as a typical
// image would, gets the reserved IPv4 address by DHCPv4 and the reserved
// IPv6 address by DHCPv6, takes the bridge as its IPv6 default router from
// the router advertisements, and pings the IPv6 gateway; the lease is
// bound for both.
func TestVMGetsBothAddresses(t *testing.T) {
	g := testvm.Need(t, "ip", "iptables", "nsenter")
	bin := buildBinaries(t)
	d := startStandalone(t, bin, netnstest.New(t, "node"), "10.250.31.0/24,fd00:250:31::/64", "--dns", "10.96.0.10,fd00:96::a",
		"--search", "default.svc.cluster.local")
	pod := netnstest.New(t, "pod")
	res := d.cniAddResult(t, pod, "vm6", "vm-six")
	if len(res.IPs) != 2 {
		t.Fatalf("CNI result IPs %v, want IPv4 and IPv6", res.IPs)
	}
	tap := res.Interfaces[len(res.Interfaces)-1]
	reserved, reserved6 := res.IPs[0].Address.IP.String(), res.IPs[1].Address.IP.String()

	vm, err := g.Run(t.Context(), testvm.Config{
		NetNS: pod.Path, Tap: tap.Name, MAC: tap.Mac, Mode: testvm.ModeDHCP, IPv6: true,
		Ping: []string{"10.250.31.1", "fd00:250:31::1"}, Timeout: 3 * time.Minute,
	})
	if err != nil {
		t.Fatalf("guest: %v", err)
	}
	if vm.DHCP == nil || vm.DHCP.IP.String() != reserved {
		t.Errorf("guest's DHCPv4 lease %+v, want %s", vm.DHCP, reserved)
	}
	if l6 := vm.DHCP6; l6 == nil || l6.IP.String() != reserved6 || len(l6.DNS) != 1 || l6.DNS[0].String() != "fd00:96::a" ||
		len(l6.Search) != 1 || l6.Search[0] != "default.svc.cluster.local" {
		t.Errorf("guest's DHCPv6 lease %+v (events %v), want %s with DNS fd00:96::a and the search list", l6, vm.DHCP6Events, reserved6)
	}
	if n := vm.Net6; n == nil || len(n.Addrs) != 1 || n.Addrs[0].Addr().String() != reserved6 || !n.Gateway.IsLinkLocalUnicast() {
		t.Errorf("guest's IPv6 configuration %+v, want %s and a link-local default router", n, reserved6)
	}
	for _, target := range []string{"10.250.31.1", "fd00:250:31::1"} {
		if p, ok := vm.Ping(target); !ok || !p.OK {
			t.Errorf("guest could not ping %s: %+v", target, vm.Pings)
		}
	}
	if len(vm.Errors) > 0 {
		t.Errorf("guest errors: %v", vm.Errors)
	}
	snap, err := leases.Read(d.leaseFile)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := snap.ByIP(netip.MustParseAddr(reserved6)); !ok || got.State6 != leases.StateBound || got.MAC != tap.Mac {
		t.Errorf("lease after DHCPv6: %+v (found %v), want ip6 bound to %s", got, ok, tap.Mac)
	}
}

package routes

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// TestComputeAnnounce: in bgp mode a node announces its pod subnets and
// the host addresses of the VMs that moved to it, not a pod subnet that
// overlaps another node's (reported), and nothing of other nodes'.
func TestComputeAnnounce(t *testing.T) {
	nodes := []Node{
		{Name: "a", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/24"), netip.MustParsePrefix("fd00:10:244::/64")}, Addrs: []netip.Addr{netip.MustParseAddr("10.99.0.11")}},
		{Name: "b", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}, Addrs: []netip.Addr{netip.MustParseAddr("10.99.0.12")}},
		{Name: "c", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.128/25")}, Addrs: []netip.Addr{netip.MustParseAddr("10.99.0.13")}},
	}
	vms := []VM{
		{Name: "default/moved-here", Node: "a", Addrs: []netip.Addr{netip.MustParseAddr("10.244.1.7"), netip.MustParseAddr("fd00:10:244:1::7")}},
		{Name: "default/at-home", Node: "a", Addrs: []netip.Addr{netip.MustParseAddr("10.244.0.9")}},
		{Name: "default/elsewhere", Node: "b", Addrs: []netip.Addr{netip.MustParseAddr("10.244.0.8")}},
	}
	d := Compute(nodes, Policy{Self: "a", VMs: vms, Announce: true})
	if got, want := fmt.Sprint(d.Announce), "[10.244.0.0/24 10.244.1.7/32 fd00:10:244::/64 fd00:10:244:1::7/128]"; got != want {
		t.Errorf("a announces %s, want %s", got, want)
	}
	d = Compute(nodes, Policy{Self: "b", VMs: vms, Announce: true})
	if got, want := fmt.Sprint(d.Announce), "[10.244.0.8/32]"; got != want {
		t.Errorf("b announces %s, want %s (its podCIDR overlaps c's)", got, want)
	}
	found := false
	for _, s := range d.Skips {
		found = found || (s.Node == "b" && strings.HasPrefix(s.Reason, "not announced to BGP peers: podCIDR 10.244.1.0/24 overlaps 10.244.1.128/25 of node c"))
	}
	if !found {
		t.Errorf("no skip for b's overlapping podCIDR: %+v", d.Skips)
	}
	if d := Compute(nodes, Policy{Self: "a", VMs: vms}); d.Announce != nil {
		t.Errorf("announces without Policy.Announce: %v", d.Announce)
	}
}

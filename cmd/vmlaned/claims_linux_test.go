package main

import (
	"net/netip"
	"path/filepath"
	"slices"
	"testing"

	"github.com/vmlane/vmlane/leases"
	"github.com/vmlane/vmlane/plugin"
)

// fakeProxies is a bridge's NDP proxy table.
type fakeProxies map[netip.Addr]string

func (f fakeProxies) List(bridge string) ([]netip.Addr, error) {
	var out []netip.Addr
	for a, br := range f {
		if br == bridge {
			out = append(out, a)
		}
	}
	return out, nil
}
func (f fakeProxies) Add(bridge string, a netip.Addr) error { f[a] = bridge; return nil }
func (f fakeProxies) Del(bridge string, a netip.Addr) error { delete(f, a); return nil }

// The home node of VMs running elsewhere keeps their addresses held and an
// NDP proxy entry for each IPv6 one, and drops the entry of a VM that
// came back.
func TestClaimsHoldAndProxyLent(t *testing.T) {
	sub, sub6 := netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:10:244:1::/64")
	store, err := leases.Open(filepath.Join(t.TempDir(), "leases.json"), sub, sub.Addr().Next(), leases.WithSubnet6(sub6, sub6.Addr().Next()))
	if err != nil {
		t.Fatal(err)
	}
	px := fakeProxies{netip.MustParseAddr("fd00:10:244:1::9"): "vmlane0", netip.MustParseAddr("fd00:99::1"): "vmlane0"}
	s := &claimsSync{c: &config{Bridge: "vmlane0", NodeName: "node-a"}, store: store, proxies: px, warned: map[string]string{}}
	lent := []plugin.NodeClaim{{
		VM: "default/web", IPv4: netip.MustParsePrefix("10.244.1.5/24"), IPv6: netip.MustParsePrefix("fd00:10:244:1::5/64"),
		MAC: "02:76:0a:f4:01:05", Node: "node-b",
	}}
	s.holdLent(lent)
	s.proxyLent(lent)
	ls, _ := store.List()
	if len(ls) != 1 || ls[0].State != leases.StateHeld || ls[0].VMName != "default/web" || ls[0].IP6 != lent[0].IPv6.Addr() {
		t.Errorf("leases %+v, want the VM's addresses held", ls)
	}
	got, _ := px.List("vmlane0")
	slices.SortFunc(got, netip.Addr.Compare)
	want := []netip.Addr{netip.MustParseAddr("fd00:10:244:1::5"), netip.MustParseAddr("fd00:99::1")}
	if !slices.Equal(got, want) {
		t.Errorf("proxy entries %v, want %v (the VM's, and the one not of subnet6 left alone)", got, want)
	}
	s.proxyLent(nil)
	if got, _ := px.List("vmlane0"); !slices.Equal(got, want[1:]) {
		t.Errorf("proxy entries after the VM came back: %v, want %v", got, want[1:])
	}
}

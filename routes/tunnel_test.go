package routes

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestReconcileTunnel: with a tunnel, a route whose next hop is behind a
// gateway (or has no route at all) goes through the tunnel device; one
// that is on-link stays direct; a tunnel route whose next hop became
// on-link is replaced by the direct one, and back.
func TestReconcileTunnel(t *testing.T) {
	table := newFakeTable("default via 192.168.1.1 dev eth0 proto 4")
	table.gateways[netip.MustParseAddr("10.0.0.7")] = netip.MustParseAddr("192.168.1.1")
	table.noRoute = map[netip.Addr]bool{netip.MustParseAddr("fd10::7"): true}
	want := []Route{
		{Dst: netip.MustParsePrefix("10.244.1.0/24"), Via: netip.MustParseAddr("192.168.1.11"), Node: "b"},
		{Dst: netip.MustParsePrefix("10.244.6.0/24"), Via: netip.MustParseAddr("10.0.0.7"), Node: "far", TunnelVia: netip.MustParseAddr("10.244.6.0")},
		{Dst: netip.MustParsePrefix("fd00:6::/64"), Via: netip.MustParseAddr("fd10::7"), Node: "far", TunnelVia: netip.MustParseAddr("fd00:6::")},
	}
	out, err := ReconcileTunnel(table, want, DefaultProtocol, "vmlane.vxlan")
	if err != nil {
		t.Fatal(err)
	}
	wantTable := strings.Join([]string{
		"10.244.1.0/24 via 192.168.1.11 proto 77",
		"10.244.6.0/24 via 10.244.6.0 dev vmlane.vxlan proto 77",
		"default via 192.168.1.1 dev eth0 proto 4",
		"fd00:6::/64 via fd00:6:: dev vmlane.vxlan proto 77",
	}, "\n")
	if diff := cmp.Diff(wantTable, table.String()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
	if len(out.Unreachable) != 0 || len(out.Tunneled) != 2 || out.Tunneled[0].Dev != "vmlane.vxlan" || len(out.Installed) != 3 {
		t.Errorf("outcome %+v", out)
	}

	// Again: nothing changes, and the tunnel routes are still reported
	// (their peers keep their FDB entries).
	table.calls = nil
	out, err = ReconcileTunnel(table, want, DefaultProtocol, "vmlane.vxlan")
	if err != nil || len(table.calls) != 0 || len(out.Tunneled) != 2 || len(out.Installed) != 0 {
		t.Errorf("second pass: calls %v, outcome %+v, err %v", table.calls, out, err)
	}

	// far's IPv4 next hop becomes on-link: direct route.
	delete(table.gateways, netip.MustParseAddr("10.0.0.7"))
	out, err = ReconcileTunnel(table, want, DefaultProtocol, "vmlane.vxlan")
	if err != nil || len(out.Tunneled) != 1 || !strings.Contains(table.String(), "10.244.6.0/24 via 10.0.0.7 proto 77") {
		t.Errorf("on-link: outcome %+v, err %v, table\n%s", out, err, table)
	}
	// And off-link again.
	table.gateways[netip.MustParseAddr("10.0.0.7")] = netip.MustParseAddr("192.168.1.1")
	delete(table.routes, netip.MustParsePrefix("10.244.6.0/24")) // the kernel drops a route whose gateway left its subnet
	out, err = ReconcileTunnel(table, want, DefaultProtocol, "vmlane.vxlan")
	if err != nil || len(out.Tunneled) != 2 || !strings.Contains(table.String(), "10.244.6.0/24 via 10.244.6.0 dev vmlane.vxlan") {
		t.Errorf("off-link again: outcome %+v, err %v, table\n%s", out, err, table)
	}

	// A route whose node has no pod subnet of its family has no tunnel
	// next hop: unreachable.
	table = newFakeTable()
	table.gateways[netip.MustParseAddr("10.0.0.7")] = netip.MustParseAddr("192.168.1.1")
	noVia := want[1]
	noVia.TunnelVia = netip.Addr{}
	if out, _ = ReconcileTunnel(table, []Route{noVia}, DefaultProtocol, "vmlane.vxlan"); len(out.Unreachable) != 1 {
		t.Errorf("no tunnel next hop: outcome %+v", out)
	}

	// Without a tunnel (--cross-subnet=off), the same route is
	// unreachable, as before.
	table = newFakeTable()
	table.gateways[netip.MustParseAddr("10.0.0.7")] = netip.MustParseAddr("192.168.1.1")
	out, _ = ReconcileTunnel(table, want[1:2], DefaultProtocol, "")
	if len(out.Unreachable) != 1 || len(out.Tunneled) != 0 {
		t.Errorf("no tunnel: outcome %+v", out)
	}
}

func TestTunnelPeers(t *testing.T) {
	local := netip.MustParseAddr("192.168.77.11")
	addrs := map[string][]netip.Addr{
		"c":     {netip.MustParseAddr("192.168.78.13"), netip.MustParseAddr("fd78::13")},
		"v6":    {netip.MustParseAddr("fd79::14")},
		"twin":  {netip.MustParseAddr("192.168.78.13")}, // c's address: c's MAC
		"empty": nil,
	}
	tunneled := []Route{
		{Dst: netip.MustParsePrefix("10.244.13.0/24"), Via: netip.MustParseAddr("10.244.13.0"), Node: "c"},
		{Dst: netip.MustParsePrefix("fd00:13::/64"), Via: netip.MustParseAddr("fd00:13::"), Node: "c"},
		{Dst: netip.MustParsePrefix("10.244.9.7/32"), Via: netip.MustParseAddr("10.244.13.0"), Node: "c"}, // a VM of c's
		{Dst: netip.MustParsePrefix("fd00:14::/64"), Via: netip.MustParseAddr("fd00:14::"), Node: "v6"},
		{Dst: netip.MustParsePrefix("10.244.15.0/24"), Via: netip.MustParseAddr("10.244.15.0"), Node: "twin"},
	}
	peers, skips := TunnelPeers(tunneled, addrs, local)
	if len(peers) != 1 || peers[0].Node != "c" || peers[0].MAC.String() != "0e:76:c0:a8:4e:0d" || peers[0].Underlay != netip.MustParseAddr("192.168.78.13") ||
		len(peers[0].Vias) != 2 {
		t.Errorf("peers %+v", peers)
	}
	var why []string
	for _, s := range skips {
		why = append(why, s.Node+": "+s.Reason)
	}
	got := strings.Join(why, "\n")
	for _, w := range []string{"v6: no IPv4 address to reach node v6 through the VXLAN tunnel", "twin: node twin's VXLAN MAC 0e:76:c0:a8:4e:0d (from underlay address 192.168.78.13) is c's too"} {
		if !strings.Contains(got, w) {
			t.Errorf("skips lack %q:\n%s", w, got)
		}
	}
}

func TestVXLANOverheadAndMAC(t *testing.T) {
	if VXLANOverhead(netip.MustParseAddr("10.0.0.1")) != 50 || VXLANOverhead(netip.MustParseAddr("fd00::1")) != 70 {
		t.Error("overhead")
	}
	if got := VTEPMAC(netip.MustParseAddr("fd78::a:b0c:d0e")).String(); got != "0e:76:0b:0c:0d:0e" {
		t.Errorf("VTEPMAC = %s", got)
	}
}

// recordingTunnel is a Tunnel that records what Loop asks of it.
type recordingTunnel struct {
	ensureErr error
	peers     [][]TunnelPeer
	sources   [][]netip.Addr
}

func (r *recordingTunnel) Device() string    { return "vmlane.vxlan" }
func (r *recordingTunnel) Local() netip.Addr { return netip.MustParseAddr("192.168.1.10") }
func (r *recordingTunnel) Ensure() error     { return r.ensureErr }
func (r *recordingTunnel) Sync(p []TunnelPeer, sources []netip.Addr) error {
	r.peers = append(r.peers, p)
	r.sources = append(r.sources, sources)
	return nil
}

// TestLoopTunnel: the loop programs the tunnel's peers from the routes
// that went through it, and a device that cannot be made leaves the
// routes unreachable and the reconcile healthy, with the error in
// TunnelErr.
func TestLoopTunnel(t *testing.T) {
	table := newFakeTable()
	table.gateways[netip.MustParseAddr("10.0.0.7")] = netip.MustParseAddr("192.168.1.1")
	nodes := []Node{
		{Name: "self", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/24")}, Addrs: []netip.Addr{netip.MustParseAddr("192.168.1.10")}},
		{Name: "far", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.6.0/24")}, Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.7")}},
	}
	tun := &recordingTunnel{}
	l := &Loop{Table: table, Proto: DefaultProtocol, Tunnel: tun, Desired: func() Desired { return Compute(nodes, Policy{Self: "self", Tunnel: true}) }}
	l.Init()
	out, err := l.Once()
	if err != nil || out.TunnelErr != nil || len(tun.peers) != 1 || len(tun.peers[0]) != 1 || tun.peers[0][0].Node != "far" {
		t.Fatalf("outcome %+v, err %v, peers %+v", out, err, tun.peers)
	}
	if got := fmt.Sprint(tun.sources); got != "[[10.0.0.7]]" {
		t.Errorf("sources = %s, want the other node's address alone", got)
	}
	tun.ensureErr = errors.New("UDP port 4789 in use")
	table = newFakeTable()
	table.gateways[netip.MustParseAddr("10.0.0.7")] = netip.MustParseAddr("192.168.1.1")
	l.Table = table
	out, err = l.Once()
	if err != nil || out.TunnelErr == nil || len(out.Unreachable) != 1 || len(tun.peers) != 1 {
		t.Errorf("device failing: outcome %+v, err %v", out, err)
	}
}

// TestReconcileFabric: in bgp mode, a VM's host route whose node is not
// on-link goes via the gateway toward that node (the fabric, which has the
// /32 from the node's announcement), and stays without churn; a pod subnet
// route to the same node is left to the default route (unreachable, no
// route); on-link again, the host route goes direct.
func TestReconcileFabric(t *testing.T) {
	table := newFakeTable("default via 192.168.1.1 dev eth0 proto 4")
	far := netip.MustParseAddr("10.0.0.7")
	table.gateways[far] = netip.MustParseAddr("192.168.1.1")
	want := []Route{
		{Dst: netip.MustParsePrefix("10.244.0.9/32"), Via: far, Node: "far"},
		{Dst: netip.MustParsePrefix("10.244.6.0/24"), Via: far, Node: "far"},
	}
	o := OffLink{Fabric: true}
	out, err := ReconcileOffLink(table, want, DefaultProtocol, o)
	if err != nil || len(out.ViaFabric) != 1 || len(out.Unreachable) != 1 || out.Unreachable[0].Dst.Bits() != 24 {
		t.Fatalf("outcome %+v, err %v", out, err)
	}
	if got := table.String(); !strings.Contains(got, "10.244.0.9/32 via 192.168.1.1 proto 77") || strings.Contains(got, "10.244.6.0/24") {
		t.Errorf("table:\n%s", got)
	}
	table.calls = nil
	out, err = ReconcileOffLink(table, want, DefaultProtocol, o)
	for _, c := range table.calls {
		if strings.HasPrefix(c, "replace 10.244.0.9/32") {
			t.Errorf("second pass replaced the fabric route again: %v", table.calls)
		}
	}
	if err != nil || len(out.ViaFabric) != 1 {
		t.Errorf("second pass: %+v, %v", out, err)
	}
	delete(table.gateways, far)
	if out, err = ReconcileOffLink(table, want, DefaultProtocol, o); err != nil || len(out.ViaFabric) != 0 ||
		!strings.Contains(table.String(), "10.244.0.9/32 via 10.0.0.7 proto 77") {
		t.Errorf("on-link: %+v, %v\n%s", out, err, table)
	}
}

func TestTunnelSources(t *testing.T) {
	addrs := map[string][]netip.Addr{
		"b": {netip.MustParseAddr("192.168.2.7"), netip.MustParseAddr("fd02::7"), netip.MustParseAddr("10.0.0.7")},
		"c": {netip.MustParseAddr("fd03::9"), netip.MustParseAddr("192.168.3.9")},
		"d": {netip.MustParseAddr("192.168.2.7")}, // the same address twice: once
	}
	if got := fmt.Sprint(TunnelSources(addrs, netip.MustParseAddr("192.168.1.10"))); got != "[10.0.0.7 192.168.2.7 192.168.3.9]" {
		t.Errorf("IPv4 underlay: %s", got)
	}
	if got := fmt.Sprint(TunnelSources(addrs, netip.MustParseAddr("fd01::1"))); got != "[fd02::7 fd03::9]" {
		t.Errorf("IPv6 underlay: %s", got)
	}
}

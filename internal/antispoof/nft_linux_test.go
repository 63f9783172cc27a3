package antispoof_test

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/vmlane/vmlane/internal/antispoof"
	"github.com/vmlane/vmlane/internal/testing/frametest"
	"github.com/vmlane/vmlane/internal/testing/netnstest"
)

// lan is a node namespace with a bridge and two pods on it, each a veth
// whose host end is a bridge port.
type lan struct {
	node, a, b *netnstest.NS
	table      antispoof.Table
	portA      antispoof.Port
	portB      antispoof.Port
}

var (
	gw = netip.MustParseAddr("10.9.0.1")
	// router6 is the node's link-local address on the bridge, as the
	// table is told it (Table.Routers6).
	router6 = netip.MustParseAddr("fe80::1")
)

func newLAN(t *testing.T) *lan {
	t.Helper()
	l := &lan{node: netnstest.New(t, "node"), a: netnstest.New(t, "a"), b: netnstest.New(t, "b")}
	l.table = antispoof.Table{NetNS: l.node.Path, Routers6: []netip.Addr{router6}}
	l.node.MustRun(t, "ip", "link", "add", "br0", "type", "bridge")
	l.node.MustRun(t, "ip", "addr", "add", gw.String()+"/24", "dev", "br0")
	l.node.MustRun(t, "ip", "link", "set", "br0", "up")
	pod := func(ns *netnstest.NS, host, mac, ip, ip6 string) antispoof.Port {
		l.node.MustRun(t, "ip", "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", ns.Name)
		l.node.MustRun(t, "ip", "link", "set", host, "master", "br0", "up")
		ns.MustRun(t, "ip", "link", "set", "eth0", "address", mac, "up")
		ns.MustRun(t, "ip", "addr", "add", ip+"/24", "dev", "eth0")
		m, _ := net.ParseMAC(mac)
		return antispoof.Port{Name: host, MAC: m, IP: netip.MustParseAddr(ip), IP6: netip.MustParseAddr(ip6)}
	}
	l.portA = pod(l.a, "vmlA", "02:00:0a:09:00:02", "10.9.0.2", "fd09::2")
	l.portB = pod(l.b, "vmlB", "02:00:0a:09:00:03", "10.9.0.3", "fd09::3")
	return l
}

type attack struct {
	name string
	// frame is what pod a sends; probe is what shows it arrived at pod
	// b (the frame's L3 payload unless set).
	frame, probe []byte
	// stopped: anti-spoofing drops it. The rest are a guest's ordinary
	// traffic, which must pass.
	stopped bool
}

// typeRARP is RARP's ethertype, which QEMU's announcement of a migrated
// guest uses.
const typeRARP = 0x8035

func attacks(l *lan) []attack {
	macA, ipA := l.portA.MAC, l.portA.IP
	macB, ipB := l.portB.MAC, l.portB.IP
	forged := net.HardwareAddr{0x02, 0xee, 0, 0, 0, 1}
	any4 := netip.MustParseAddr("0.0.0.0")
	bcast := netip.MustParseAddr("255.255.255.255")
	mark := func(s string) []byte { return []byte("vmlane antispoof test: " + s) }
	udp := func(src netip.Addr, sport, dport uint16, s string) []byte {
		return frametest.UDP4(src, bcast, sport, dport, mark(s))
	}
	dhcp := func(chaddr net.HardwareAddr) []byte {
		m, err := dhcpv4.NewDiscovery(chaddr)
		if err != nil {
			panic(err)
		}
		return frametest.UDP4(any4, bcast, 68, 67, m.ToBytes())
	}
	e := func(src net.HardwareAddr, typ uint16, p []byte) attack {
		return attack{frame: frametest.Ether(frametest.Broadcast, src, typ, p), probe: p}
	}
	named := func(a attack, name string, stopped bool) attack {
		a.name, a.stopped = name, stopped
		return a
	}
	vlanPayload := udp(ipA, 9999, 9999, "vlan")
	allNodes := netip.MustParseAddr("ff02::1")
	udp6 := func(src netip.Addr, s string) []byte { return frametest.UDP6(src, allNodes, 9999, 9999, mark(s)) }
	return append([]attack{
		named(e(macA, frametest.TypeIPv4, udp(ipA, 9999, 9999, "own")), "own MAC and address", false),
		named(e(macA, frametest.TypeIPv4, udp(ipB, 9999, 9999, "ip spoof")), "IP spoof (neighbour's address)", true),
		named(e(macA, frametest.TypeIPv4, udp(gw, 9999, 9999, "gw spoof")), "IP spoof (gateway's address)", true),
		named(e(forged, frametest.TypeIPv4, udp(ipA, 9999, 9999, "mac spoof")), "MAC spoof", true),
		named(e(macB, frametest.TypeIPv4, udp(ipB, 9999, 9999, "neigh spoof")), "MAC and IP of the neighbour", true),
		named(e(macA, frametest.TypeARP, frametest.ARP(2, macA, ipA, frametest.Broadcast, ipA)), "gratuitous ARP for itself", false),
		named(e(macA, frametest.TypeARP, frametest.ARP(2, macA, gw, frametest.Broadcast, gw)), "ARP poisoning of the gateway", true),
		named(e(macA, frametest.TypeARP, frametest.ARP(2, macA, ipB, frametest.Broadcast, ipB)), "ARP poisoning of a neighbour", true),
		named(e(macA, frametest.TypeARP, frametest.ARP(1, forged, ipA, net.HardwareAddr{0, 0, 0, 0, 0, 0}, gw)), "ARP with a forged sender MAC", true),
		named(e(macA, frametest.TypeARP, frametest.ARP(1, macA, any4, net.HardwareAddr{0, 0, 0, 0, 0, 0}, ipA)), "ARP probe (RFC 5227)", false),
		named(e(macA, typeRARP, frametest.ARP(3, macA, any4, macA, any4)), "RARP self-announce (QEMU after a live migration)", false),
		named(e(macA, typeRARP, frametest.ARP(3, macA, any4, macB, any4)), "RARP request for the neighbour's MAC", true),
		named(e(macA, typeRARP, frametest.ARP(4, macA, ipA, macA, ipA)), "RARP reply", true),
		named(e(macA, typeRARP, frametest.ARP(3, forged, any4, forged, any4)), "RARP self-announce of a forged MAC", true),
		named(e(macA, frametest.TypeIPv4, dhcp(macA)), "DHCPDISCOVER for itself", false),
		named(e(macA, frametest.TypeIPv4, dhcp(macB)), "DHCPDISCOVER with the neighbour's chaddr", true),
		named(e(macA, frametest.TypeIPv4, udp(ipA, 67, 68, "rogue dhcp")), "DHCP server reply (rogue server)", true),
		named(attack{frame: frametest.VLAN(frametest.Broadcast, macA, 7, frametest.TypeIPv4, vlanPayload), probe: vlanPayload}, "802.1Q-tagged frame", true),
		named(e(macA, frametest.TypeIPv6, frametest.RouterAdvert(netip.MustParseAddr("fe80::1"))), "IPv6 router advertisement", true),
		named(e(macA, frametest.TypeIPv6, udp6(l.portA.IP6, "own ip6")), "own IPv6 address", false),
		named(e(macA, frametest.TypeIPv6, udp6(netip.MustParseAddr("fe80::a"), "link-local")), "IPv6 link-local source", false),
		named(e(macA, frametest.TypeIPv6, udp6(netip.IPv6Unspecified(), "unspecified")), "IPv6 from ::", false),
		named(e(macA, frametest.TypeIPv6, udp6(l.portB.IP6, "ip6 spoof")), "IPv6 spoof (neighbour's address)", true),
		named(e(macA, frametest.TypeIPv6, udp6(netip.MustParseAddr("fd09::1"), "gw6 spoof")), "IPv6 spoof (gateway's address)", true),
		named(e(forged, frametest.TypeIPv6, udp6(l.portA.IP6, "mac6 spoof")), "IPv6 with a forged MAC", true),
	}, ndAttacks(l, e, named)...)
}

// ndAttacks are neighbour discovery from pod a: advertisements and
// solicitations that would move a neighbour's (or the router's) entry in
// the node's and the pods' neighbour caches to a MAC of the attacker's
// choosing, beside the ones a guest sends every day.
func ndAttacks(l *lan, e func(net.HardwareAddr, uint16, []byte) attack, named func(attack, string, bool) attack) []attack {
	macA, ip6A, ip6B := l.portA.MAC, l.portA.IP6, l.portB.IP6
	forged := net.HardwareAddr{0x02, 0xee, 0, 0, 0, 1}
	llA, allNodes := netip.MustParseAddr("fe80::a"), netip.MustParseAddr("ff02::1")
	solicited := func(a netip.Addr) netip.Addr {
		b := a.As16()
		return netip.AddrFrom16([16]byte{0xff, 0x02, 11: 1, 12: 0xff, 13: b[13], 14: b[14], 15: b[15]})
	}
	tlla, slla := frametest.LLAddrOption(2, macA), frametest.LLAddrOption(1, macA)
	nd := func(p []byte, name string, stopped bool) attack {
		return named(e(macA, frametest.TypeIPv6, p), name, stopped)
	}
	return []attack{
		nd(frametest.NeighAdvert(llA, allNodes, ip6B, true, false, tlla), "NA for the neighbour's IPv6 address (override)", true),
		nd(frametest.NeighAdvert(llA, allNodes, router6, true, false, tlla), "NA for the router's link-local address", true),
		nd(frametest.NeighAdvert(llA, allNodes, ip6A, true, false, frametest.LLAddrOption(2, forged)), "NA for its own address with a forged target MAC", true),
		nd(frametest.NeighAdvert(llA, allNodes, ip6A, true, false, tlla, frametest.LLAddrOption(2, forged)), "NA with a second, forged, target MAC", true),
		nd(frametest.NeighAdvert(ip6A, allNodes, ip6A, true, false, tlla), "NA for its own IPv6 address", false),
		nd(frametest.NeighAdvert(llA, allNodes, llA, true, true, tlla), "NA for its own link-local address", false),
		nd(frametest.NeighAdvert(llA, allNodes, ip6A, false, true), "NA with no option", false),
		nd(frametest.NeighSolicit(llA, solicited(ip6B), ip6B, frametest.LLAddrOption(1, forged)), "NS with a forged source MAC", true),
		nd(frametest.NeighSolicit(llA, solicited(ip6B), ip6B, slla), "NS for the neighbour, from its own MAC", false),
		nd(frametest.NeighSolicit(netip.IPv6Unspecified(), solicited(ip6A), ip6A, frametest.NonceOption()), "DAD probe with a nonce", false),
		nd(frametest.NeighSolicit(router6, solicited(ip6B), ip6B, slla), "NS from the router's link-local address", true),
		nd(frametest.UDP6(router6, allNodes, 9999, 9999, []byte("vmlane antispoof test: router6")), "IPv6 from the router's link-local address", true),
		nd(frametest.RouterSolicit(llA, frametest.LLAddrOption(1, forged)), "RS with a forged source MAC", true),
		nd(frametest.RouterSolicit(llA, slla), "RS from its own MAC", false),
	}
}

// run sends every attack from pod a and reports which reached pod b.
func (l *lan) run(t *testing.T) map[string]bool {
	t.Helper()
	from, to := frametest.OpenIn(t, l.a, "eth0"), frametest.OpenIn(t, l.b, "eth0")
	arrived := map[string]bool{}
	for _, a := range attacks(l) {
		if err := from.Send(a.frame); err != nil {
			t.Fatalf("%s: sending: %v", a.name, err)
		}
		wait := 300 * time.Millisecond
		if !a.stopped {
			wait = 3 * time.Second // a frame that must arrive gets time to
		}
		_, err := to.Wait(wait, func(f []byte) bool { return bytes.Contains(f, a.probe) })
		arrived[a.name] = err == nil
	}
	return arrived
}

func TestAttacksStoppedOnlyWithAntiSpoof(t *testing.T) {
	l := newLAN(t)
	before := l.run(t)
	for _, a := range attacks(l) {
		if !before[a.name] {
			t.Errorf("without anti-spoofing, %q did not arrive: the test cannot show the rules stop it", a.name)
		}
	}
	for _, p := range []antispoof.Port{l.portA, l.portB} {
		if err := l.table.Add(p); err != nil {
			t.Fatal(err)
		}
		if err := l.table.Attach(p); err != nil {
			t.Fatal(err)
		}
	}
	after := l.run(t)
	for _, a := range attacks(l) {
		if after[a.name] == a.stopped {
			t.Errorf("with anti-spoofing, %q arrived=%v, want %v", a.name, after[a.name], !a.stopped)
		}
	}
	// A port that is removed is no longer checked.
	if err := l.table.Remove(l.portA.Name); err != nil {
		t.Fatal(err)
	}
	removed := l.run(t)
	for _, a := range attacks(l) {
		if !removed[a.name] {
			t.Errorf("after Remove, %q did not arrive", a.name)
		}
	}
}

func TestPortsAddRemoveSync(t *testing.T) {
	l := newLAN(t)
	if ps, err := l.table.Ports(); err != nil || len(ps) != 0 {
		t.Fatalf("no table: Ports = %v, %v; want none", ps, err)
	}
	if err := l.table.Remove("vmlA"); err != nil {
		t.Fatalf("Remove with no table: %v", err)
	}
	for range 2 { // Add is idempotent
		if err := l.table.Add(l.portA); err != nil {
			t.Fatal(err)
		}
	}
	moved := l.portA
	moved.IP = netip.MustParseAddr("10.9.0.9")
	if err := l.table.Add(moved); err != nil {
		t.Fatal(err)
	}
	wantPorts(t, l.table, moved)
	// Its IPv6 address alone changes, and goes.
	moved.IP6 = netip.MustParseAddr("fd09::9")
	if err := l.table.Add(moved); err != nil {
		t.Fatal(err)
	}
	wantPorts(t, l.table, moved)
	moved.IP6 = netip.Addr{}
	if err := l.table.Add(moved); err != nil {
		t.Fatal(err)
	}
	wantPorts(t, l.table, moved)

	ch, err := sync(l.table, l.portA, l.portB)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Repaired != "" || len(ch.Added) != 2 || len(ch.Removed) != 1 {
		t.Errorf("Sync changes = %+v, want 2 added (A's new address, B), 1 removed, no repair", ch)
	}
	wantPorts(t, l.table, l.portA, l.portB)
	if ch, err := sync(l.table, l.portA, l.portB); err != nil || ch.Repaired != "" || len(ch.Added)+len(ch.Removed) != 0 {
		t.Errorf("second Sync = %+v, %v; want no change", ch, err)
	}
	// An entry added after the caller listed the table (a CNI ADD racing
	// vmlaned's read of the lease file) stays, though want lacks it.
	listed, err := l.table.Ports()
	if err != nil {
		t.Fatal(err)
	}
	late := antispoof.Port{Name: "vmlLate", MAC: l.portA.MAC, IP: netip.MustParseAddr("10.9.0.20")}
	if err := l.table.Add(late); err != nil {
		t.Fatal(err)
	}
	if _, err := l.table.Sync([]antispoof.Port{l.portA}, listed); err != nil {
		t.Fatal(err)
	}
	wantPorts(t, l.table, l.portA, late) // B, listed and not wanted, went
	if err := l.table.Delete(); err != nil {
		t.Fatal(err)
	}
	if err := l.table.Delete(); err != nil {
		t.Fatalf("second Delete: %v", err)
	}
	if err := l.table.Verify(); err == nil || !strings.Contains(err.Error(), "table missing") {
		t.Errorf("Verify after Delete = %v, want table missing", err)
	}
}

// sync is Sync of want, with the table listed first as callers do.
func sync(tb antispoof.Table, want ...antispoof.Port) (antispoof.Changes, error) {
	listed, err := tb.Ports()
	if err != nil {
		return antispoof.Changes{}, err
	}
	return tb.Sync(want, listed)
}

func wantPorts(t *testing.T, tb antispoof.Table, want ...antispoof.Port) {
	t.Helper()
	got, err := tb.Ports()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("Ports = %v, want %v", got, want)
	}
	for i := range got {
		if got[i].String() != want[i].String() {
			t.Errorf("Ports[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}

// TestTamperedTableIsRepaired changes the table as another tool could
// (a rule deleted, a rule inserted ahead of ours, a set flushed) and
// checks that Verify sees it and Sync puts it back.
func TestTamperedTableIsRepaired(t *testing.T) {
	l := newLAN(t)
	want := []antispoof.Port{l.portA, l.portB}
	tamper := map[string]func(c *nftables.Conn, tb *nftables.Table){
		"rule deleted": func(c *nftables.Conn, tb *nftables.Table) {
			ch := &nftables.Chain{Name: "ipv4", Table: tb}
			rules, err := c.GetRules(tb, ch)
			if err != nil || len(rules) == 0 {
				t.Fatalf("rules of ipv4: %v, %v", rules, err)
			}
			if err := c.DelRule(rules[2]); err != nil {
				t.Fatal(err)
			}
		},
		"accept inserted first": func(c *nftables.Conn, tb *nftables.Table) {
			c.InsertRule(&nftables.Rule{Table: tb, Chain: &nftables.Chain{Name: "ports", Table: tb},
				Exprs: acceptAll()})
		},
		"table deleted": func(c *nftables.Conn, tb *nftables.Table) { c.DelTable(tb) },
	}
	for name, fn := range tamper {
		t.Run(name, func(t *testing.T) {
			if _, err := sync(l.table, want...); err != nil {
				t.Fatal(err)
			}
			if err := l.table.Verify(); err != nil {
				t.Fatalf("Verify after Sync: %v", err)
			}
			err := l.node.Do(func() error {
				c, err := nftables.New()
				if err != nil {
					return err
				}
				fn(c, &nftables.Table{Name: antispoof.TableName, Family: nftables.TableFamilyBridge})
				return c.Flush()
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := l.table.Verify(); err == nil {
				t.Fatal("Verify after tampering = nil")
			}
			ch, err := sync(l.table, want...)
			if err != nil {
				t.Fatal(err)
			}
			if ch.Repaired == "" {
				t.Errorf("Sync after tampering did not say it repaired")
			}
			if err := l.table.Verify(); err != nil {
				t.Errorf("Verify after repair: %v", err)
			}
			wantPorts(t, l.table, want...)
		})
	}
}

func TestPortValidate(t *testing.T) {
	mac, _ := net.ParseMAC("02:00:00:00:00:01")
	ip := netip.MustParseAddr("10.0.0.2")
	for _, c := range []struct {
		p    antispoof.Port
		want string
	}{
		{antispoof.Port{Name: "", MAC: mac, IP: ip}, `port name ""`},
		{antispoof.Port{Name: "a-name-way-too-long", MAC: mac, IP: ip}, "not an interface name"},
		{antispoof.Port{Name: "v", MAC: mac[:4], IP: ip}, "not a 48-bit MAC"},
		{antispoof.Port{Name: "v", MAC: net.HardwareAddr{1, 0, 0, 0, 0, 1}, IP: ip}, "multicast"},
		{antispoof.Port{Name: "v", MAC: mac, IP: netip.MustParseAddr("::1")}, "not a unicast IPv4"},
		{antispoof.Port{Name: "v", MAC: mac, IP: netip.MustParseAddr("0.0.0.0")}, "not a unicast IPv4"},
		{antispoof.Port{Name: "v", MAC: mac, IP: ip, IP6: netip.MustParseAddr("fe80::1")}, "not a global unicast IPv6"},
		{antispoof.Port{Name: "v", MAC: mac, IP: ip, IP6: netip.MustParseAddr("ff02::1")}, "not a global unicast IPv6"},
		{antispoof.Port{Name: "v", MAC: mac, IP: ip, IP6: netip.MustParseAddr("10.0.0.3")}, "not a global unicast IPv6"},
	} {
		if err := c.p.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%v) = %v, want %q", c.p, err, c.want)
		}
	}
	if err := (antispoof.Port{Name: "vml0123456789a", MAC: mac, IP: ip}).Validate(); err != nil {
		t.Errorf("Validate of a good port: %v", err)
	}
}

func acceptAll() []expr.Any { return []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}} }

// TestTablesOfTwoNetworks: each vmlane network (bridge) has a table of its
// own. A port in one table passes the other's chains, so the attacks from
// pod a are stopped and its own traffic passes exactly as with one table;
// and a Sync of one table, which removes every port its network no longer
// has, leaves the other table's ports alone.
func TestTablesOfTwoNetworks(t *testing.T) {
	l := newLAN(t)
	other := antispoof.Table{NetNS: l.node.Path, Name: antispoof.TableName + "-br1"}
	if err := l.table.Add(l.portA); err != nil {
		t.Fatal(err)
	}
	if err := other.Add(l.portB); err != nil {
		t.Fatal(err)
	}
	got := l.run(t)
	for _, a := range attacks(l) {
		if got[a.name] == a.stopped {
			t.Errorf("with a's port in one table and b's in another, %q arrived=%v, want %v", a.name, got[a.name], !a.stopped)
		}
	}
	listed, err := other.Ports()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Sync(nil, listed); err != nil {
		t.Fatal(err)
	}
	if ps, err := other.Ports(); err != nil || len(ps) != 0 {
		t.Errorf("%s after a Sync to no ports: %v, %v", other.Name, ps, err)
	}
	if ps, err := l.table.Ports(); err != nil || len(ps) != 1 || ps[0].Name != l.portA.Name {
		t.Errorf("%s after the other table's Sync: %v, %v; want %s alone", antispoof.TableName, ps, err, l.portA.Name)
	}
	if err := l.table.Verify(); err != nil {
		t.Errorf("Verify %s: %v", antispoof.TableName, err)
	}
	if err := other.Delete(); err != nil {
		t.Fatal(err)
	}
	if err := l.table.Verify(); err != nil {
		t.Errorf("Verify %s after deleting %s: %v", antispoof.TableName, other.Name, err)
	}
}

// TestAddSeenWithAStaleView: AddSeen writes against a view read earlier,
// and a view that went stale meanwhile (vmlaned swept the port's old
// entry, the table was deleted, another port came) still leaves the table
// exactly as Add would.
func TestAddSeenWithAStaleView(t *testing.T) {
	l := newLAN(t)
	none, err := l.table.View()
	if err != nil || none.Exists || len(none.Ports) != 0 {
		t.Fatalf("no table: View = %+v, %v", none, err)
	}
	// Another port arrived after the view of no table.
	if err := l.table.AddSeen(l.portB, none); err != nil {
		t.Fatal(err)
	}
	if err := l.table.AddSeen(l.portA, none); err != nil {
		t.Fatal(err)
	}
	wantPorts(t, l.table, l.portA, l.portB)
	if err := l.table.Verify(); err != nil {
		t.Fatalf("Verify: %v", err)
	}

	// The port's old entry swept after the view: the delete the view
	// asks for finds nothing, and Add reads again.
	v, err := l.table.View()
	if err != nil || !v.Exists || len(v.Ports) != 2 {
		t.Fatalf("View = %+v, %v", v, err)
	}
	if err := l.table.Remove(l.portA.Name); err != nil {
		t.Fatal(err)
	}
	moved := l.portA
	moved.IP = netip.MustParseAddr("10.9.0.9")
	if err := l.table.AddSeen(moved, v); err != nil {
		t.Fatal(err)
	}
	wantPorts(t, l.table, moved, l.portB)

	// The table deleted after the view.
	v, _ = l.table.View()
	if err := l.table.Delete(); err != nil {
		t.Fatal(err)
	}
	if err := l.table.AddSeen(l.portA, v); err != nil {
		t.Fatal(err)
	}
	wantPorts(t, l.table, l.portA)
	if err := l.table.Verify(); err != nil {
		t.Fatalf("Verify after AddSeen on a deleted table: %v", err)
	}

	// A fresh view: the old entry replaced in one write.
	v, _ = l.table.View()
	if err := l.table.AddSeen(moved, v); err != nil {
		t.Fatal(err)
	}
	wantPorts(t, l.table, moved)
}

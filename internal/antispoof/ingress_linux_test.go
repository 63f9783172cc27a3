package antispoof_test

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vmlane/vmlane/internal/antispoof"
	"github.com/vmlane/vmlane/internal/bridge"
	"github.com/vmlane/vmlane/internal/testing/frametest"
)

// linkLocalAttack sends, from pod a, a frame with pod b's MAC as its source
// to each IEEE 802.1D link-local group address 01:80:c2:00:00:00 to 0f,
// and reports the groups after whose frame the bridge's forwarding
// database put b's MAC on a's port (the node's traffic to b would go to a)
// and those whose frame reached b.
func linkLocalAttack(t *testing.T, l *lan) (learned, forwarded []string) {
	t.Helper()
	from, to := frametest.OpenIn(t, l.a, "eth0"), frametest.OpenIn(t, l.b, "eth0")
	for g := range 16 {
		group := net.HardwareAddr{0x01, 0x80, 0xc2, 0x00, 0x00, byte(g)}
		mark := []byte(fmt.Sprintf("vmlane link-local test %02x", g))
		// 0x88cc is LLDP's ethertype; the bridge treats every group
		// alike whatever the frame carries.
		if err := from.Send(frametest.Ether(group, l.portB.MAC, 0x88cc, mark)); err != nil {
			t.Fatal(err)
		}
		if _, err := to.Wait(200*time.Millisecond, func(f []byte) bool { return bytes.Contains(f, mark) }); err == nil {
			forwarded = append(forwarded, fmt.Sprintf("%02x", g))
		}
		fdb := l.node.MustRun(t, "bridge", "fdb", "show", "br", "br0", "dev", l.portA.Name)
		if strings.Contains(fdb, l.portB.MAC.String()) {
			learned = append(learned, fmt.Sprintf("%02x", g))
			l.node.MustRun(t, "bridge", "fdb", "del", l.portB.MAC.String(), "dev", l.portA.Name, "master")
		}
	}
	return learned, forwarded
}

// TestLinkLocalFramesLearnNothing: the bridge handles frames to the
// link-local groups outside its prerouting hook, so the bridge table alone
// lets a guest put a neighbour's MAC on its own port with them. Each of
// the two fixes stops it on its own: the port's ingress chain (Attach),
// which checks the source MAC before the bridge sees the frame, and the
// bridge's no_linklocal_learn, which vmlane's bridges have on.
func TestLinkLocalFramesLearnNothing(t *testing.T) {
	l := newLAN(t)
	for _, p := range []antispoof.Port{l.portA, l.portB} {
		if err := l.table.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	learned, _ := linkLocalAttack(t, l)
	if len(learned) == 0 {
		t.Fatal("with the bridge table alone, no link-local frame moved b's MAC to a's port: the test cannot show the fixes stop it")
	}
	t.Logf("the bridge table alone: groups %v moved b's MAC to a's port", learned)

	if err := l.table.Attach(l.portA); err != nil {
		t.Fatal(err)
	}
	if learned, forwarded := linkLocalAttack(t, l); len(learned)+len(forwarded) != 0 {
		t.Errorf("with a's ingress chain: groups %v moved b's MAC to a's port, %v reached b", learned, forwarded)
	}

	// A new node: the bridge table, no ingress chain, the bridge's option.
	l = newLAN(t)
	for _, p := range []antispoof.Port{l.portA, l.portB} {
		if err := l.table.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.node.Do(func() error { _, err := bridge.EnsureNoLinkLocalLearn("br0"); return err }); err != nil {
		t.Fatal(err)
	}
	if learned, _ := linkLocalAttack(t, l); len(learned) != 0 {
		t.Errorf("with the bridge table and no_linklocal_learn: groups %v moved b's MAC to a's port", learned)
	}
}

// TestNeighbourAdvertisementPoisoning: an unsolicited advertisement from
// pod a, with b's IPv6 address as its target and the override flag, moves
// the node's neighbour entry for b to a's MAC (the node's traffic to b,
// and what other nodes route in, would go to a) without anti-spoofing,
// and not with it.
func TestNeighbourAdvertisementPoisoning(t *testing.T) {
	l := newLAN(t)
	l.node.MustRun(t, "ip", "addr", "add", "fd09::1/64", "dev", "br0", "nodad")
	l.a.MustRun(t, "ip", "addr", "add", l.portA.IP6.String()+"/64", "dev", "eth0", "nodad")
	l.b.MustRun(t, "ip", "addr", "add", l.portB.IP6.String()+"/64", "dev", "eth0", "nodad")
	from := frametest.OpenIn(t, l.a, "eth0")
	poisoned := func() bool {
		t.Helper()
		l.node.MustRun(t, "ip", "-6", "neigh", "flush", "dev", "br0")
		l.node.MustRun(t, "ping", "-6", "-c1", "-W2", l.portB.IP6.String())
		na := frametest.NeighAdvert(netip.MustParseAddr("fe80::a"), netip.MustParseAddr("ff02::1"), l.portB.IP6, true, false,
			frametest.LLAddrOption(2, l.portA.MAC))
		for range 3 {
			if err := from.Send(frametest.Ether(net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}, l.portA.MAC, frametest.TypeIPv6, na)); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(100 * time.Millisecond)
		out := l.node.MustRun(t, "ip", "-6", "neigh", "show", l.portB.IP6.String(), "dev", "br0")
		if !strings.Contains(out, "lladdr") {
			t.Fatalf("the node has no neighbour entry for b: %q", out)
		}
		return strings.Contains(out, l.portA.MAC.String())
	}
	if !poisoned() {
		t.Fatal("without anti-spoofing the NA did not move the node's entry for b: the test cannot show the rules stop it")
	}
	for _, p := range []antispoof.Port{l.portA, l.portB} {
		if err := l.table.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	if poisoned() {
		t.Error("with anti-spoofing, a's NA moved the node's neighbour entry for b to a's MAC")
	}
}

// TestIngressChainsSync: Sync puts an ingress chain on every checked port
// whose link exists (pods attached by a vmlane from before the chains),
// none on a port without a link, takes the chains of ports it removes,
// repairs a chain someone changed, and makes routers6 what it is told;
// Remove and Delete take the chains and the netdev table with the rest.
func TestIngressChainsSync(t *testing.T) {
	l := newLAN(t)
	gone := antispoof.Port{Name: "vmlGone", MAC: l.portA.MAC, IP: netip.MustParseAddr("10.9.0.30")}
	if err := l.table.Add(l.portA); err != nil {
		t.Fatal(err)
	}
	ch, err := sync(l.table, l.portA, l.portB, gone)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ch.Attached, " "); got != "vmlA vmlB" || ch.Repaired != "" {
		t.Errorf("first Sync: attached %q, repaired %q; want vmlA vmlB and no repair", got, ch.Repaired)
	}
	wantChains(t, l, "vmlA", "vmlB")
	if ch, err := sync(l.table, l.portA, l.portB, gone); err != nil || ch.Repaired != "" || len(ch.Attached)+len(ch.Detached)+len(ch.Added)+len(ch.Removed) != 0 {
		t.Errorf("second Sync = %+v, %v; want no change", ch, err)
	}

	// A chain deleted, a rule inserted ahead of another's.
	if err := l.node.Do(func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		nd := &nftables.Table{Name: antispoof.TableName, Family: nftables.TableFamilyNetdev}
		c.DelChain(&nftables.Chain{Name: "vmlA", Table: nd})
		c.InsertRule(&nftables.Rule{Table: nd, Chain: &nftables.Chain{Name: "vmlB", Table: nd}, Exprs: acceptAll()})
		return c.Flush()
	}); err != nil {
		t.Fatal(err)
	}
	if err := l.table.Verify(); err == nil || !strings.Contains(err.Error(), "ingress chain vmlB") {
		t.Errorf("Verify after tampering = %v, want the changed chain vmlB named", err)
	}
	ch, err = sync(l.table, l.portA, l.portB, gone)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(ch.Attached, " ") != "vmlA" || !strings.Contains(ch.Repaired, "vmlB") {
		t.Errorf("Sync after tampering: attached %v, repaired %q; want vmlA attached, vmlB repaired", ch.Attached, ch.Repaired)
	}
	if err := l.table.Verify(); err != nil {
		t.Errorf("Verify after repair: %v", err)
	}

	// Routers6 as told; nil leaves them.
	two := antispoof.Table{NetNS: l.node.Path, Routers6: []netip.Addr{router6, netip.MustParseAddr("fe80::2")}}
	if _, err := sync(two, l.portA, l.portB); err != nil {
		t.Fatal(err)
	}
	nilRouters := antispoof.Table{NetNS: l.node.Path}
	ch, err = sync(nilRouters, l.portA)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(ch.Detached, " ") != "vmlB" {
		t.Errorf("Sync without b: detached %v, want vmlB", ch.Detached)
	}
	wantChains(t, l, "vmlA")
	v, err := l.table.View()
	if err != nil || len(v.Routers6) != 2 {
		t.Errorf("routers6 after a Sync to two and one told none: %v, %v", v.Routers6, err)
	}
	if err := l.table.Remove("vmlA"); err != nil {
		t.Fatal(err)
	}
	wantChains(t, l)
	if err := l.table.Delete(); err != nil {
		t.Fatal(err)
	}
	if out := l.node.MustRun(t, "ip", "-d", "link", "show", "vmlA"); !strings.Contains(out, "vmlA") {
		t.Fatalf("vmlA: %s", out)
	}
	if err := l.node.Do(func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		tables, err := c.ListTables()
		if err != nil {
			return err
		}
		for _, tb := range tables {
			t.Errorf("after Delete, table %s of family %d is left", tb.Name, tb.Family)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// wantChains checks the netdev table's chains by name.
func wantChains(t *testing.T, l *lan, want ...string) {
	t.Helper()
	var got []string
	if err := l.node.Do(func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyNetdev)
		for _, ch := range chains {
			got = append(got, ch.Name)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) && len(got)+len(want) > 0 {
		t.Errorf("netdev chains = %v, want %v", got, want)
	}
}

// TestTableFromBefore: a table written by a vmlane from before the netdev
// table (simulated by deleting it) still takes Remove and
// Add, and Sync makes it whole with every port's MAC in the netdev table.
func TestTableFromBefore(t *testing.T) {
	l := newLAN(t)
	for _, p := range []antispoof.Port{l.portA, l.portB} {
		if err := l.table.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.node.Do(func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		c.DelTable(&nftables.Table{Name: antispoof.TableName, Family: nftables.TableFamilyNetdev})
		return c.Flush()
	}); err != nil {
		t.Fatal(err)
	}
	if err := l.table.Remove(l.portB.Name); err != nil {
		t.Fatalf("Remove on a table from before: %v", err)
	}
	wantPorts(t, l.table, l.portA)
	ch, err := sync(l.table, l.portA, l.portB)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ch.Repaired, "netdev table missing") || strings.Join(ch.Attached, " ") != "vmlA vmlB" {
		t.Errorf("Sync of a table from before: %+v", ch)
	}
	if err := l.table.Verify(); err != nil {
		t.Errorf("Verify after Sync: %v", err)
	}
	// Both ports' traffic passes their ingress chains: their MACs are in
	// the netdev table.
	got := l.run(t)
	for _, a := range attacks(l) {
		if got[a.name] == a.stopped {
			t.Errorf("after the repair, %q arrived=%v, want %v", a.name, got[a.name], !a.stopped)
		}
	}
}

// TestAttachAfterTheLinkCameBack: a port whose veth went and came back
// under its name (a retried ADD of the same attachment, whose DEL left its
// chain to vmlaned) is checked on the new link once Attach is called, and
// Attach then rewrites nothing: a chain kept from the old link (Linux 6.16
// and later bind it to the new one) stays as it was.
func TestAttachAfterTheLinkCameBack(t *testing.T) {
	l := newLAN(t)
	for _, p := range []antispoof.Port{l.portA, l.portB} {
		if err := l.table.Add(p); err != nil {
			t.Fatal(err)
		}
		if err := l.table.Attach(p); err != nil {
			t.Fatal(err)
		}
	}
	handles := func() string {
		var out []string
		if err := l.node.Do(func() error {
			c, err := nftables.New()
			if err != nil {
				return err
			}
			nd := &nftables.Table{Name: antispoof.TableName, Family: nftables.TableFamilyNetdev}
			rules, err := c.GetRules(nd, &nftables.Chain{Name: l.portA.Name, Table: nd})
			for _, r := range rules {
				out = append(out, fmt.Sprint(r.Handle))
			}
			return err
		}); err != nil {
			return "none: " + err.Error()
		}
		return strings.Join(out, " ")
	}
	before := handles()
	l.node.MustRun(t, "ip", "link", "del", "vmlA")
	kept := handles() == before
	l.node.MustRun(t, "ip", "link", "add", "vmlA", "type", "veth", "peer", "name", "eth0", "netns", l.a.Name)
	if err := l.table.Attach(l.portA); err != nil {
		t.Fatal(err)
	}
	l.node.MustRun(t, "ip", "link", "set", "vmlA", "master", "br0", "up")
	l.a.MustRun(t, "ip", "link", "set", "eth0", "address", l.portA.MAC.String(), "up")
	l.a.MustRun(t, "ip", "addr", "add", l.portA.IP.String()+"/24", "dev", "eth0")
	switch after := handles(); {
	case !kept:
		t.Logf("this kernel removed the chain with its link (before Linux 6.16): Attach made it again, rules %q", after)
	case after != before:
		t.Errorf("Attach rewrote the chain the old link left: rules %q, then %q", before, after)
	}
	if learned, forwarded := linkLocalAttack(t, l); len(learned)+len(forwarded) != 0 {
		t.Errorf("on the new link: groups %v moved b's MAC to a's port, %v reached b", learned, forwarded)
	}
	got := l.run(t)
	for _, a := range attacks(l) {
		if got[a.name] == a.stopped {
			t.Errorf("on the new link, %q arrived=%v, want %v", a.name, got[a.name], !a.stopped)
		}
	}
}

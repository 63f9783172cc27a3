package bridge

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"golang.org/x/net/ipv6"

	"github.com/vmlane/vmlane/internal/ra"
	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/privtest"
)

// TestAwayRedirect: a pod on the bridge whose neighbour entry names a VM's
// MAC (the VM left for another node; the pod's entry has not aged out)
// reaches the VM only through the table bridge vmlane-away: with the
// VM's MAC in it, the frame goes up to the node, which routes it to the
// VM's node; without, it is lost on the bridge. The other way round, a
// guest that moved in here from the remote node's subnet, whose entry for
// a pod of its home subnet names that pod's MAC, reaches it only with its
// port in the table. Both IPv4 and IPv6.
func TestAwayRedirect(t *testing.T) {
	privtest.Require(t, "ip", "ping")
	node, pod, remote, guest := netnstest.New(t, "node"), netnstest.New(t, "pod"), netnstest.New(t, "remote"), netnstest.New(t, "guest")
	const vmMAC = "02:76:0a:f4:00:06"
	err := node.Do(func() error {
		_, err := Ensure("vmlane0", netip.MustParsePrefix("10.244.0.1/24"), 1500, "02:76:00:00:00:01")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range [][]string{
		{"ip", "-6", "addr", "add", "fd00:10:244::1/64", "dev", "vmlane0", "nodad"},
		// As vmlaned sets them: forwarding, and proxy ARP on the bridge.
		{"sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1", "net.ipv4.conf.vmlane0.proxy_arp=1"},
		{"ip", "link", "add", "vethp", "type", "veth", "peer", "name", "eth0", "netns", pod.Name},
		{"ip", "link", "set", "vethp", "master", "vmlane0", "up"},
		{"ip", "link", "add", "vethr", "type", "veth", "peer", "name", "eth0", "netns", remote.Name},
		{"ip", "addr", "add", "10.99.0.11/24", "dev", "vethr"},
		{"ip", "-6", "addr", "add", "fd99::11/64", "dev", "vethr", "nodad"},
		{"ip", "link", "set", "vethr", "up"},
		// The VM runs behind node-b now: its /32 and /128 go there.
		{"ip", "route", "add", "10.244.0.6/32", "via", "10.99.0.12"},
		{"ip", "-6", "route", "add", "fd00:10:244::6/128", "via", "fd99::12"},
		// A guest from the remote node's subnet runs here: its host
		// routes onto the bridge, its home subnet via the remote node.
		{"ip", "link", "add", "vethg", "type", "veth", "peer", "name", "eth0", "netns", guest.Name},
		{"ip", "link", "set", "vethg", "master", "vmlane0", "up"},
		{"ip", "route", "add", "10.244.9.6/32", "dev", "vmlane0"},
		{"ip", "-6", "route", "add", "fd00:10:244:9::6/128", "dev", "vmlane0"},
		{"ip", "route", "add", "10.244.9.0/24", "via", "10.99.0.12"},
		{"ip", "-6", "route", "add", "fd00:10:244:9::/64", "via", "fd99::12"},
	} {
		node.MustRun(t, c[0], c[1:]...)
	}
	for _, c := range [][]string{
		{"ip", "addr", "add", "10.244.9.6/24", "dev", "eth0"},
		{"ip", "-6", "addr", "add", "fd00:10:244:9::6/64", "dev", "eth0", "nodad"},
		{"ip", "link", "set", "eth0", "up"},
		{"ip", "route", "add", "default", "via", "10.244.9.1"},
		{"ip", "-6", "route", "add", "default", "via", "fe80::76:ff:fe00:1", "dev", "eth0"},
		// What the guest learnt of a pod of its home subnet before it
		// moved.
		{"ip", "neigh", "replace", "10.244.9.5", "lladdr", "02:76:0a:f4:09:05", "dev", "eth0", "nud", "permanent"},
		{"ip", "-6", "neigh", "replace", "fd00:10:244:9::5", "lladdr", "02:76:0a:f4:09:05", "dev", "eth0", "nud", "permanent"},
	} {
		guest.MustRun(t, c[0], c[1:]...)
	}
	for _, c := range [][]string{
		{"ip", "addr", "add", "10.244.0.5/24", "dev", "eth0"},
		{"ip", "-6", "addr", "add", "fd00:10:244::5/64", "dev", "eth0", "nodad"},
		{"ip", "link", "set", "eth0", "up"},
		{"ip", "route", "add", "default", "via", "10.244.0.1"},
		{"ip", "-6", "route", "add", "default", "via", "fe80::76:ff:fe00:1", "dev", "eth0"},
		// What the pod learnt while the VM ran on this node.
		{"ip", "neigh", "replace", "10.244.0.6", "lladdr", vmMAC, "dev", "eth0", "nud", "permanent"},
		{"ip", "-6", "neigh", "replace", "fd00:10:244::6", "lladdr", vmMAC, "dev", "eth0", "nud", "permanent"},
	} {
		pod.MustRun(t, c[0], c[1:]...)
	}
	for _, c := range [][]string{
		{"ip", "addr", "add", "10.99.0.12/24", "dev", "eth0"},
		{"ip", "-6", "addr", "add", "fd99::12/64", "dev", "eth0", "nodad"},
		{"ip", "link", "set", "eth0", "up"},
		{"ip", "addr", "add", "10.244.0.6/32", "dev", "lo"},
		{"ip", "-6", "addr", "add", "fd00:10:244::6/128", "dev", "lo"},
		{"ip", "addr", "add", "10.244.9.5/32", "dev", "lo"},
		{"ip", "-6", "addr", "add", "fd00:10:244:9::5/128", "dev", "lo"},
		{"ip", "route", "add", "10.244.0.0/24", "via", "10.99.0.11"},
		{"ip", "-6", "route", "add", "fd00:10:244::/64", "via", "fd99::11"},
		{"ip", "route", "add", "10.244.9.6/32", "via", "10.99.0.11"},
		{"ip", "-6", "route", "add", "fd00:10:244:9::6/128", "via", "fd99::11"},
	} {
		remote.MustRun(t, c[0], c[1:]...)
	}
	reach := func() (v4, v6 bool) {
		_, e4 := pod.Run("ping", "-c1", "-W1", "10.244.0.6")
		_, e6 := pod.Run("ping", "-6", "-c1", "-W1", "fd00:10:244::6")
		return e4 == nil, e6 == nil
	}
	guestReach := func() (v4, v6 bool) {
		_, e4 := guest.Run("ping", "-c1", "-W1", "10.244.9.5")
		_, e6 := guest.Run("ping", "-6", "-c1", "-W1", "fd00:10:244:9::5")
		return e4 == nil, e6 == nil
	}
	sync := func(macs []string, ports ...string) {
		t.Helper()
		local := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/24"), netip.MustParsePrefix("fd00:10:244::/64")}
		if err := node.Do(func() error { return SyncAway("vmlane0", local, macs, ports) }); err != nil {
			t.Fatal(err)
		}
	}

	hasTable := func() bool {
		t.Helper()
		var found bool
		err := node.Do(func() error {
			c, err := nftables.New()
			if err != nil {
				return err
			}
			ts, err := c.ListTablesOfFamily(nftables.TableFamilyBridge)
			found = slices.ContainsFunc(ts, func(tb *nftables.Table) bool { return tb.Name == AwayTable })
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return found
	}
	sync(nil) // no MACs and no table: nothing written
	if hasTable() {
		t.Error("a table written with no MACs")
	}
	if v4, v6 := reach(); v4 || v6 {
		t.Fatalf("without the table the pod reached the VM (v4 %v, v6 %v): the test proves nothing", v4, v6)
	}
	if v4, v6 := guestReach(); v4 || v6 {
		t.Fatalf("without the table the guest reached its home's pod (v4 %v, v6 %v): the test proves nothing", v4, v6)
	}
	sync([]string{vmMAC})
	sync([]string{vmMAC}) // again: the same table
	if v4, v6 := reach(); !v4 || !v6 {
		t.Errorf("with the VM's MAC in the table: reached v4 %v, v6 %v; want both", v4, v6)
	}
	if v4, v6 := guestReach(); v4 || v6 {
		t.Errorf("the guest's port not in the table: reached v4 %v, v6 %v; want neither", v4, v6)
	}
	sync([]string{"02:76:0a:f4:00:99"}, "vethg")
	if v4, v6 := reach(); v4 || v6 {
		t.Errorf("with another MAC only: reached v4 %v, v6 %v; want neither", v4, v6)
	}
	if v4, v6 := guestReach(); !v4 || !v6 {
		t.Errorf("with the guest's port in the table: reached v4 %v, v6 %v; want both", v4, v6)
	}
	// The guest's traffic to its gateway and beyond is unchanged.
	if _, err := guest.Run("ping", "-c1", "-W1", "10.244.0.5"); err != nil {
		t.Errorf("the guest → a pod of this node, with its port in the table: %v", err)
	}
	// The pod reaches the guest that moved in through the node, which
	// sends it no redirect: the pod never learns the guest's MAC, which
	// leaves with the guest.
	redirected := func() (v4, v6 bool) {
		t.Helper()
		if out, err := pod.Run("ping", "-c2", "-i0.2", "-W1", "10.244.9.6"); err != nil {
			t.Errorf("the pod → the guest through the node: %v\n%s", err, out)
		}
		if out, err := pod.Run("ping", "-6", "-c2", "-i0.2", "-W1", "fd00:10:244:9::6"); err != nil {
			t.Errorf("the pod → the guest through the node over IPv6: %v\n%s", err, out)
		}
		r4, _ := pod.Run("ip", "route", "get", "10.244.9.6")
		n6, _ := pod.Run("ip", "-6", "neigh", "show", "fd00:10:244:9::6")
		return strings.Contains(r4, "redirected"), strings.TrimSpace(n6) != ""
	}
	if v4, v6 := redirected(); v4 || v6 {
		t.Errorf("with the table the node redirected the pod to the guest (v4 %v, v6 %v)", v4, v6)
	}
	// The node's router advertisements reach its pods, not the guest
	// that moved in (its port is in the table).
	advertise := func() (podGot, guestGot bool) {
		t.Helper()
		err := node.Do(func() error {
			msg, err := ra.Build(ra.Config{Iface: "vmlane0", Prefix: netip.MustParsePrefix("fd00:77::/64")}, net.HardwareAddr{2, 0x76, 0, 0, 0, 1}, 0)
			if err != nil {
				return err
			}
			c, err := net.ListenPacket("ip6:ipv6-icmp", "::")
			if err != nil {
				return err
			}
			defer c.Close()
			pc := ipv6.NewPacketConn(c)
			if err := pc.SetMulticastHopLimit(255); err != nil {
				return err
			}
			_, err = pc.WriteTo(msg, nil, &net.IPAddr{IP: net.ParseIP("ff02::1"), Zone: "vmlane0"})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		p, _ := pod.Run("ip", "-6", "route", "show", "fd00:77::/64")
		g, _ := guest.Run("ip", "-6", "route", "show", "fd00:77::/64")
		return strings.Contains(p, "fd00:77::/64"), strings.Contains(g, "fd00:77::/64")
	}
	if p, g := advertise(); !p || g {
		t.Errorf("the node's advertisement with the guest's port in the table: the pod took it %v (want true), the guest %v (want false)", p, g)
	}
	// A pod of this node that takes the guest for on-link (a route of its
	// own: the node's redirects, which said so before, are dropped now)
	// resolves it and talks to it at layer 2: the guest's ARP reply and
	// its echo replies, to the pod's MAC, stay on the bridge.
	pod.MustRun(t, "ip", "route", "add", "10.244.9.6/32", "dev", "eth0")
	if out, err := pod.Run("ping", "-c2", "-W1", "10.244.9.6"); err != nil {
		t.Errorf("a pod of this node → the guest at layer 2, the guest's port in the table: %v\n%s", err, out)
	}
	if !hasTable() {
		t.Error("no table after SyncAway with MACs")
	}
	if err := node.Do(DeleteAway); err != nil {
		t.Fatal(err)
	}
	if hasTable() {
		t.Error("the table is there after DeleteAway")
	}
	// Without the table the node does redirect the pod to the guest.
	pod.MustRun(t, "ip", "route", "del", "10.244.9.6/32", "dev", "eth0")
	if v4, v6 := redirected(); !v4 || !v6 {
		t.Errorf("without the table: redirected v4 %v, v6 %v; want both: the test proves nothing", v4, v6)
	}
	if _, g := advertise(); !g {
		t.Error("without the table the guest did not take the node's advertisement either: the test proves nothing")
	}
	if err := node.Do(DeleteAway); err != nil {
		t.Errorf("DeleteAway of a table that is gone: %v", err)
	}
}

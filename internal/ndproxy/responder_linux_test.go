package ndproxy

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmlane/vmlane/internal/ra"
	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/privtest"
)

// TestResponder: a guest that moved in from the remote node's subnet, on
// a port of this node's bridge, reaches a pod of its home subnet over IPv6
// only with the Responder watching its port: the Linux kernel of the guest
// resolves the pod's address, takes the bridge's MAC from the advertisement
// and sends to the node, which routes home. Without it (or for an address
// on this bridge, or outside the guest's home subnet) nobody answers. A
// stale entry's unicast probe is answered too.
func TestResponder(t *testing.T) {
	privtest.Require(t, "ip", "ping")
	node, remote, guest := netnstest.New(t, "node"), netnstest.New(t, "remote"), netnstest.New(t, "guest")
	const (
		bridgeMAC = "02:76:00:00:00:01"
		gMAC      = "02:76:0a:f4:09:06"
	)
	for _, c := range [][]string{
		{"ip", "link", "add", "vmlane0", "address", bridgeMAC, "type", "bridge"},
		{"ip", "-6", "addr", "add", "fd00:10:244::1/64", "dev", "vmlane0", "nodad"},
		{"ip", "link", "set", "vmlane0", "up"},
		{"sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"},
		{"ip", "link", "add", "vethr", "type", "veth", "peer", "name", "eth0", "netns", remote.Name},
		{"ip", "-6", "addr", "add", "fd99::11/64", "dev", "vethr", "nodad"},
		{"ip", "link", "set", "vethr", "up"},
		// The guest from the remote node's subnet: its host route onto
		// the bridge, its home subnet via the remote node.
		{"ip", "link", "add", "vethg", "type", "veth", "peer", "name", "eth0", "netns", guest.Name},
		{"ip", "link", "set", "vethg", "master", "vmlane0", "up"},
		{"ip", "-6", "route", "add", "fd00:10:244:9::6/128", "dev", "vmlane0"},
		{"ip", "-6", "route", "add", "fd00:10:244:9::/64", "via", "fd99::12"},
		{"ip", "-6", "route", "add", "fd00:10:244:8::/64", "via", "fd99::12"},
	} {
		node.MustRun(t, c[0], c[1:]...)
	}
	for _, c := range [][]string{
		{"ip", "link", "set", "eth0", "address", gMAC},
		{"ip", "-6", "addr", "add", "fd00:10:244:9::6/64", "dev", "eth0", "nodad"},
		{"ip", "link", "set", "eth0", "up"},
		// Another subnet the guest takes for on-link, not its home.
		{"ip", "-6", "route", "add", "fd00:10:244:8::/64", "dev", "eth0"},
		// A stale entry's probe comes after 1 s, not 5.
		{"sysctl", "-qw", "net.ipv6.neigh.eth0.delay_first_probe_time=1"},
	} {
		guest.MustRun(t, c[0], c[1:]...)
	}
	for _, c := range [][]string{
		{"ip", "-6", "addr", "add", "fd99::12/64", "dev", "eth0", "nodad"},
		{"ip", "link", "set", "eth0", "up"},
		{"ip", "-6", "addr", "add", "fd00:10:244:9::5/128", "dev", "lo"},
		{"ip", "-6", "addr", "add", "fd00:10:244:9::7/128", "dev", "lo"},
		{"ip", "-6", "addr", "add", "fd00:10:244:8::5/128", "dev", "lo"},
		{"ip", "-6", "route", "add", "fd00:10:244:9::6/128", "via", "fd99::11"},
	} {
		remote.MustRun(t, c[0], c[1:]...)
	}
	ping := func(dst string) bool {
		// Two tries: the first packet waits on neighbour resolution at
		// every hop of a namespace just made.
		_, err := guest.Run("ping", "-6", "-c2", "-i0.3", "-W1", dst)
		return err == nil
	}
	neigh := func(dst string) string {
		out, _ := guest.Run("ip", "-6", "neigh", "show", dst, "dev", "eth0")
		return strings.TrimSpace(out)
	}
	flush := func() { guest.MustRun(t, "ip", "-6", "neigh", "flush", "dev", "eth0") }

	if ping("fd00:10:244:9::5") {
		t.Fatal("without the responder the guest reached its home's pod: the test proves nothing")
	}
	flush()

	advert := func(home netip.Prefix, mac net.HardwareAddr) ([]byte, error) {
		return ra.Build(ra.Config{Iface: "vmlane0", Prefix: home}, mac, ra.DefaultRouterLifetime)
	}
	r := New("vmlane0", advert, nil)
	t.Cleanup(r.Close)
	g := Guest{Port: "vethg", MAC: mustMAC(t, gMAC), Home: netip.MustParsePrefix("fd00:10:244:9::/64")}
	onBridge := []netip.Addr{netip.MustParseAddr("fd00:10:244:9::6"), netip.MustParseAddr("fd00:10:244:9::7")}
	sync := func(gs ...Guest) {
		t.Helper()
		if err := node.Do(func() error { return r.Sync(gs, onBridge) }); err != nil {
			t.Fatal(err)
		}
	}
	sync(g)
	sync(g) // again: the same socket
	if got := r.Ports(); !slices.Equal(got, []string{"vethg"}) {
		t.Errorf("Ports = %v, want [vethg]", got)
	}
	if !ping("fd00:10:244:9::5") {
		t.Errorf("with the responder: the guest did not reach its home's pod; neighbour %q", neigh("fd00:10:244:9::5"))
	}
	if n := neigh("fd00:10:244:9::5"); !strings.Contains(n, "lladdr "+bridgeMAC) {
		t.Errorf("the guest's neighbour entry for its home's pod: %q, want the bridge's MAC", n)
	}
	// The guest gets its home's router advertisement: the same router
	// (every node's bridge has its MAC and link-local address) and its
	// home subnet, nothing of this node's.
	waitRoutes := func(why string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			def, _ := guest.Run("ip", "-6", "route", "show", "default")
			if strings.Contains(def, "via fe80::76:ff:fe00:1") && strings.Contains(def, "proto ra") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the guest's default route %q 10 s on, want one via fe80::76:ff:fe00:1 from an advertisement", why, def)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if all, _ := guest.Run("ip", "-6", "route"); strings.Contains(all, "fd00:10:244::") {
			t.Errorf("%s: the guest learnt this node's subnet:\n%s", why, all)
		}
	}
	waitRoutes("after Sync")
	// Its router solicitation (its link going down and up) is answered
	// at once, not at the next periodic one.
	guest.MustRun(t, "sysctl", "-qw", "net.ipv6.conf.eth0.keep_addr_on_down=1")
	guest.MustRun(t, "ip", "link", "set", "eth0", "down")
	guest.MustRun(t, "ip", "link", "set", "eth0", "up")
	waitRoutes("after a router solicitation")
	guest.MustRun(t, "ip", "-6", "route", "replace", "fd00:10:244:8::/64", "dev", "eth0") // gone with the link

	// Not answered: an address on this bridge (another VM that moved in
	// answers for itself), and one outside the guest's home subnet.
	for _, dst := range []string{"fd00:10:244:9::7", "fd00:10:244:8::5"} {
		if ping(dst) {
			t.Errorf("the guest reached %s: the node answered for it", dst)
		}
	}

	// A stale entry naming the pod's own MAC (from before the guest
	// moved): the kernel's unicast probe gets the node's answer.
	flush()
	guest.MustRun(t, "ip", "-6", "neigh", "replace", "fd00:10:244:9::5", "lladdr", "02:76:0a:f4:09:05", "dev", "eth0", "nud", "stale")
	guest.Run("ping", "-6", "-c1", "-W1", "fd00:10:244:9::5") // lost: sent to the pod's MAC
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(neigh("fd00:10:244:9::5"), "lladdr "+bridgeMAC) {
		if time.Now().After(deadline) {
			t.Fatalf("a stale entry's probe: the entry is %q 10 s on, want the bridge's MAC", neigh("fd00:10:244:9::5"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !ping("fd00:10:244:9::5") {
		t.Error("after the probe's answer: the guest did not reach its home's pod")
	}

	// The guest's port is made anew (a retried ADD): watched anew.
	node.MustRun(t, "ip", "link", "del", "vethg")
	node.MustRun(t, "ip", "link", "add", "vethg", "type", "veth", "peer", "name", "eth0", "netns", guest.Name)
	node.MustRun(t, "ip", "link", "set", "vethg", "master", "vmlane0", "up")
	for _, c := range [][]string{
		{"ip", "link", "set", "eth0", "address", gMAC},
		{"ip", "-6", "addr", "add", "fd00:10:244:9::6/64", "dev", "eth0", "nodad"},
		{"ip", "link", "set", "eth0", "up"},
	} {
		guest.MustRun(t, c[0], c[1:]...)
	}
	sync(g)
	if !ping("fd00:10:244:9::5") {
		t.Errorf("a port made anew: the guest did not reach its home's pod; neighbour %q", neigh("fd00:10:244:9::5"))
	}

	// The guest leaves (or goes home): nothing is answered any more.
	sync()
	if got := r.Ports(); len(got) != 0 {
		t.Errorf("Ports after a Sync of none = %v", got)
	}
	flush()
	if ping("fd00:10:244:9::5") {
		t.Error("after a Sync of no guests the guest still reached its home's pod")
	}
}

func mustMAC(t *testing.T, s string) net.HardwareAddr {
	t.Helper()
	m, err := net.ParseMAC(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

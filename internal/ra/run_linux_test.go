package ra

import (
	"context"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/privtest"
)

// TestGuestKernelTakesAdvertisements runs the advertiser on a bridge in a
// node namespace, and checks with a guest namespace's own kernel that it
// takes the bridge as its default router and the prefix as on-link, makes
// no SLAAC address (A=0), and takes the MTU; and that a solicitation gets
// an answer long before the next periodic advertisement.
func TestGuestKernelTakesAdvertisements(t *testing.T) {
	privtest.Require(t, "ip")
	node, guest := netnstest.New(t, "ranode"), netnstest.New(t, "raguest")
	node.MustRun(t, "ip", "link", "add", "br0", "type", "bridge")
	node.MustRun(t, "ip", "link", "set", "br0", "address", "02:76:0a:f4:03:01", "up")
	node.MustRun(t, "ip", "addr", "add", "fd00:99::1/64", "dev", "br0", "nodad")
	node.MustRun(t, "ip", "link", "add", "vh0", "type", "veth", "peer", "name", "eth0", "netns", guest.Name)
	node.MustRun(t, "ip", "link", "set", "vh0", "master", "br0", "up")
	guest.MustRun(t, "ip", "link", "set", "eth0", "up")

	c := Config{Iface: "br0", Prefix: netip.MustParsePrefix("fd00:99::/64"), MTU: 1400, Interval: time.Hour}
	// The first advertisements come fast, then one an hour: a guest that
	// solicits after them is answered within minDelay.
	tm := timing{initial: 300 * time.Millisecond, minDelay: 500 * time.Millisecond, poll: 100 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		done <- node.Do(func() error { return run(ctx, c, nil, tm) })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})

	waitFor(t, guest, 10*time.Second, []string{"ip", "-6", "route", "show", "default"}, "proto ra")
	routes := guest.MustRun(t, "ip", "-6", "route", "show")
	// The kernel files the prefix route under proto kernel, with the
	// prefix's valid lifetime.
	if !strings.Contains(routes, "fd00:99::/64 dev eth0 proto kernel metric 256 expires") {
		t.Errorf("no on-link prefix route from the RA:\n%s", routes)
	}
	if addrs := guest.MustRun(t, "ip", "-6", "addr", "show", "dev", "eth0", "scope", "global"); strings.Contains(addrs, "fd00:99::") {
		t.Errorf("the guest made a SLAAC address (A should be 0):\n%s", addrs)
	}
	if mtu := strings.TrimSpace(guest.MustRun(t, "cat", "/proc/sys/net/ipv6/conf/eth0/mtu")); mtu != "1400" {
		t.Errorf("guest IPv6 MTU %s, want 1400 from the RA", mtu)
	}

	// After the initial ones: flush what the guest learnt, then a
	// solicitation (the kernel sends them when the link comes up) must
	// bring an answer in seconds, not in an hour.
	time.Sleep(2 * time.Second)
	guest.MustRun(t, "ip", "link", "set", "eth0", "down")
	guest.MustRun(t, "ip", "-6", "route", "flush", "proto", "ra")
	guest.MustRun(t, "ip", "link", "set", "eth0", "up")
	waitFor(t, guest, 10*time.Second, []string{"ip", "-6", "route", "show", "default"}, "proto ra")
}

func waitFor(t *testing.T, ns *netnstest.NS, d time.Duration, cmd []string, want string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		out, _ := ns.Run(cmd[0], cmd[1:]...)
		if strings.Contains(out, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v: no %q after %s:\n%s", cmd, want, d, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

//go:build e2e

package crosssubnet

import (
	"context"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmlane/vmlane/e2e/cluster"
	"github.com/vmlane/vmlane/routes"
)

func ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// podMTU is the MTU every pod and VM gets in VXLAN mode: the nodes'
// uplinks are 1500 and the underlay is IPv4.
const podMTU = 1500 - 50

// TestVXLANReachAcrossTheRouter: pods and a VM on both sides of a router
// that knows no pod subnet reach each other by pod IP, IPv4 and IPv6, and
// are seen with their own addresses (no NAT). node-a routes node-b's pod
// subnets directly and node-c's through the VXLAN device.
func TestVXLANReachAcrossTheRouter(t *testing.T) {
	useMode(t, "vxlan", nil)
	if out, err := c.Router.Run("ip", "route", "get", c1.IP.String()); err == nil {
		t.Fatalf("the router routes pod %s (%s): the test would prove nothing", c1.IP, out)
	}
	a, b, cn := c.Node("node-a"), c.Node("node-b"), c.Node("node-c")
	for _, want := range []string{
		b.PodCIDR.String() + " via " + b.IP.String() + " dev eth0",
		cn.PodCIDR.String() + " via " + cn.PodCIDR.Addr().String() + " dev " + routes.DefaultVXLANDevice + " onlink",
	} {
		if !strings.Contains(a.Routes(), want) {
			t.Errorf("node-a's routes lack %q:\n%s", want, a.Routes())
		}
	}
	if want := cn.PodCIDR6.String() + " via " + cn.PodCIDR6.Addr().String() + " dev " + routes.DefaultVXLANDevice + " "; !strings.Contains(a.Routes6(), want) {
		t.Errorf("node-a's IPv6 routes lack %q:\n%s", want, a.Routes6())
	}
	reachEachOther(t, []*cluster.Pod{a1, b1, c1, cv}, [][2]*cluster.Pod{{a1, c1}, {c1, a1}, {cv, a1}, {a1, cv}})
}

// TestVXLANMTU: pods and VMs get the uplink's MTU less the tunnel's
// headers, through the link (the conflist), DHCP option 26, and the RA's
// MTU option, and a packet of that size with DF set crosses the tunnel,
// both families.
func TestVXLANMTU(t *testing.T) {
	useMode(t, "vxlan", nil)
	for _, n := range c.Nodes {
		for _, vm := range []bool{false, true} {
			data, err := os.ReadFile(n.ConfList(vm))
			if err != nil {
				t.Fatal(err)
			}
			if want := `"mtu": ` + strconv.Itoa(podMTU); !strings.Contains(string(data), want) {
				t.Errorf("%s: %s lacks %s", n.Name, n.ConfList(vm), want)
			}
		}
	}
	for _, p := range []*cluster.Pod{a1, c1} {
		out := p.NS.MustRun(t, "ip", "-o", "link", "show", "eth0")
		if !strings.Contains(out, "mtu "+strconv.Itoa(podMTU)+" ") {
			t.Errorf("pod %s's eth0: %s, want mtu %d", p.Name, out, podMTU)
		}
	}
	res, err := cv.VM.Held(ctx(t))
	if err != nil || res.DHCP == nil || res.DHCP.MTU != podMTU {
		t.Errorf("VM cv's DHCP lease: %+v (%v), want MTU %d (option 26)", res.DHCP, err, podMTU)
	}
	// The RA's MTU option comes from the same value as option 26
	// (cmd/vmlaned startDHCPv6); udhcpc6 in the guest does not report it.
	for _, dst := range []*cluster.Pod{c1, b1} {
		for _, fam := range []struct {
			ip     netip.Addr
			header int
		}{{dst.IP, 28}, {dst.IP6, 48}} {
			size := strconv.Itoa(podMTU - fam.header)
			if out, err := a1.NS.Run("ping", "-M", "do", "-s", size, "-c", "1", "-w", "5", fam.ip.String()); err != nil {
				t.Errorf("a1 → %s %s: DF ping of %d bytes: %v\n%s", dst.Name, fam.ip, podMTU, err, out)
			}
		}
	}
}

// TestVXLANSwitchesToDirectRoute: node-a gets a link on node-c's subnet:
// node-c is on-link from node-a, whose routes to node-c go direct (at the
// next resync) and whose tunnel entries for node-c go. With the link gone
// the routes go back through the tunnel. Pods reach each other throughout.
func TestVXLANSwitchesToDirectRoute(t *testing.T) {
	useMode(t, "vxlan", nil)
	a, cn := c.Node("node-a"), c.Node("node-c")
	reach := func(what string) {
		t.Helper()
		for _, ip := range []netip.Addr{c1.IP, c1.IP6} {
			if r, err := a1.Ping(ctx(t), ip, 3); err != nil || !r.OK {
				t.Errorf("%s: a1 → %s: %+v, %v", what, ip, r, err)
			}
		}
	}
	// (Routes trims the last line's trailing blank: no blank after eth1.)
	direct := cn.PodCIDR.String() + " via " + cn.IP.String() + " dev eth1"
	direct6 := cn.PodCIDR6.String() + " via " + cn.IP6.String() + " dev eth1"
	c.AttachFar(t, a, "eth1", netip.MustParseAddr("10.98.0.211"), netip.MustParseAddr("fd98::211"))
	cluster.Eventually(t, "node-a to route node-c's pod subnets directly", func() (bool, string) {
		r, r6 := a.Routes(), a.Routes6()
		return strings.Contains(r, direct) && strings.Contains(r6, direct6), r + "\n" + r6
	})
	cluster.Eventually(t, "node-a's tunnel entries for node-c to go", func() (bool, string) {
		fdb, _ := a.NS.Run("bridge", "fdb", "show", "dev", routes.DefaultVXLANDevice)
		return !strings.Contains(fdb, cn.IP.String()), fdb
	})
	reach("direct")
	c.DetachFar(t, a, "eth1")
	tunnel := cn.PodCIDR.String() + " via " + cn.PodCIDR.Addr().String() + " dev " + routes.DefaultVXLANDevice + " onlink"
	cluster.Eventually(t, "node-a to route node-c's pod subnets through the tunnel again", func() (bool, string) {
		r := a.Routes()
		return strings.Contains(r, tunnel), r
	})
	reach("through the tunnel again")
}

// TestVXLANDaemonRestart: SIGKILL of node-a's vmlaned leaves the device and
// its routes in place (pods keep reaching node-c), and the restarted
// daemon takes them over as they are: the device is not made again.
func TestVXLANDaemonRestart(t *testing.T) {
	useMode(t, "vxlan", nil)
	a := c.Node("node-a")
	before := a.NS.MustRun(t, "ip", "-o", "link", "show", routes.DefaultVXLANDevice)
	a.Daemon().Kill()
	if r, err := a1.Ping(ctx(t), c1.IP, 3); err != nil || !r.OK {
		t.Errorf("vmlaned down: a1 → c1: %+v, %v", r, err)
	}
	d := a.StartDaemon(suite)
	cluster.Eventually(t, "node-a's vmlaned ready again", a.Ready)
	if after := a.NS.MustRun(t, "ip", "-o", "link", "show", routes.DefaultVXLANDevice); strings.Fields(after)[0] != strings.Fields(before)[0] {
		t.Errorf("the device was made again: %q, then %q\n%s", before, after, d.Logs())
	}
	if r, err := a1.Ping(ctx(t), c1.IP6, 3); err != nil || !r.OK {
		t.Errorf("after the restart: a1 → c1: %+v, %v", r, err)
	}
}

// TestVXLANLiveMigration: a VM of node-a live-migrates to node-c, behind
// the router, and back, in vxlan mode, while node-b runs vmlaned
// --routes-only (a node of another CNI, b1 standing for its pods): every
// node, node-b too, routes the VM's /32 and /128 through the tunnel to
// node-c while it runs there, and its home node's pod subnet again once
// it is back, node-b on the targets' live-migration notices too. node-a
// and node-c are labelled VM nodes for node-b.
func TestVXLANLiveMigration(t *testing.T) {
	useMode(t, "vxlan", nil)
	b := c.Node("node-b")
	restart := func(args ...string) {
		b.Daemon().Kill()
		b.ExtraArgs = append([]string{"--cross-subnet", "vxlan"}, args...)
		b.StartDaemon(suite)
		cluster.Eventually(t, "node-b's vmlaned ready", b.Ready)
	}
	for _, n := range []string{"node-a", "node-c"} {
		c.MustKubectl(t, "label", "--overwrite", "node", n, routes.VMNodeLabel+"=true")
	}
	restart("--routes-only")
	t.Cleanup(func() {
		restart()
		for _, n := range []string{"node-a", "node-c"} {
			c.Kubectl("label", "node", n, routes.VMNodeLabel+"-")
		}
	})
	vantages := []vantage{{"node-a", a1.NS}, {"node-b", b1.NS}, {"node-c", c1.NS}}
	crossMigration(t, "xvx", vantages, func(t *testing.T, on *cluster.Node, p *cluster.Pod) {
		for _, n := range []*cluster.Node{c.Node("node-a"), b} {
			cluster.Eventually(t, n.Name+"'s host routes to the VM on "+on.Name, func() (bool, string) {
				r := n.Routes() + "\n" + n.Routes6()
				if on.Name == "node-c" {
					return hostRouteVia(r, p.IP, routes.DefaultVXLANDevice) && hostRouteVia(r, p.IP6, routes.DefaultVXLANDevice), r
				}
				return !hostRouteVia(r, p.IP, "") && !hostRouteVia(r, p.IP6, ""), r
			})
		}
	})
	// node-b, of another CNI, took the targets' live-migration notices:
	// its routes moved on them, not on the claims' updates alone.
	const taken = `vmlane_peer_notices_total{result="taken"}`
	if m, err := cluster.Metrics(b.NS); err != nil || m[taken] < 1 {
		t.Errorf("routes-only node-b took no live-migration notice: %s %v (%v)", taken, m[taken], err)
	}
}

// hostRouteVia reports whether routes (ip route's lines) have a host
// route to addr (no prefix length), through dev unless dev is empty.
func hostRouteVia(routes string, addr netip.Addr, dev string) bool {
	for _, l := range strings.Split(routes, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == addr.String() && (dev == "" || strings.Contains(l, " dev "+dev+" ")) {
			return true
		}
	}
	return false
}

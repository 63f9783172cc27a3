package cluster

import (
	"net/netip"
	"testing"

	"github.com/vmlane/vmlane/internal/testing/netnstest"
)

// The far subnet: a second switch (sw1, in the switch's namespace) behind
// a router, for nodes that are not on-link with the others. The router
// forwards between the two switches and knows nothing of pod subnets, as a
// fabric router that no one peers with.
var (
	FarSubnet    = netip.MustParsePrefix("10.98.0.0/24")
	FarSubnet6   = netip.MustParsePrefix("fd98::/64")
	RouterIP     = netip.MustParseAddr("10.99.0.253") // on sw0
	RouterIP6    = netip.MustParseAddr("fd99::fd")
	FarRouterIP  = netip.MustParseAddr("10.98.0.1") // on sw1
	FarRouterIP6 = netip.MustParseAddr("fd98::1")
)

// FarNode returns s moved to the far subnet: the same last byte of its
// addresses on FarSubnet and FarSubnet6.
func FarNode(s NodeSpec) NodeSpec {
	b4, b6 := FarSubnet.Addr().As4(), FarSubnet6.Addr().As16()
	b4[3], b6[15] = s.IP.As4()[3], s.IP6.As16()[15]
	s.IP, s.IP6 = netip.AddrFrom4(b4), netip.AddrFrom16(b6)
	return s
}

// Far reports whether a is on the far subnet.
func Far(a netip.Addr) bool { return FarSubnet.Contains(a) || FarSubnet6.Contains(a) }

// addRouter makes sw1 and the router between sw0 and sw1, and routes the
// far subnet via the router from the control plane and the outside host.
func (c *Cluster) addRouter(tb testing.TB) {
	tb.Helper()
	c.step("router %s/%s between the switch and the far subnet %s, %s (it knows no pod subnet)", RouterIP, FarRouterIP, FarSubnet, FarSubnet6)
	c.Switch.MustRun(tb, "ip", "link", "add", "sw1", "type", "bridge")
	c.Switch.MustRun(tb, "ip", "link", "set", "sw1", "up")
	c.Router = c.host(tb, "rtr", netip.PrefixFrom(RouterIP, SwitchSubnet.Bits()), netip.PrefixFrom(RouterIP6, SwitchSubnet6.Bits()))
	c.attach(tb, c.Router, "sw1", "eth1", netip.PrefixFrom(FarRouterIP, FarSubnet.Bits()), netip.PrefixFrom(FarRouterIP6, FarSubnet6.Bits()))
	c.Router.MustRun(tb, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
	// The control plane is IPv4 only.
	mustIP(tb, c.CP.NetNS, "route", "add", FarSubnet.String(), "via", RouterIP.String())
	mustIP(tb, c.Outside.Name, "route", "add", FarSubnet.String(), "via", RouterIP.String())
	mustIP(tb, c.Outside.Name, "-6", "route", "add", FarSubnet6.String(), "via", RouterIP6.String())
}

// routeToFar gives n's namespace its way to the other subnet: a node on
// the far subnet goes through the router for everything; one on the
// switch too, with a route of its own to the far subnet besides, as nodes
// often have (it must not keep VXLAN's IPv6 routes out).
func (c *Cluster) routeToFar(tb testing.TB, n *netnstest.NS, far bool) {
	tb.Helper()
	if far {
		n.MustRun(tb, "ip", "route", "add", "default", "via", FarRouterIP.String())
		n.MustRun(tb, "ip", "-6", "route", "add", "default", "via", FarRouterIP6.String())
		return
	}
	n.MustRun(tb, "ip", "route", "add", "default", "via", RouterIP.String())
	n.MustRun(tb, "ip", "-6", "route", "add", "default", "via", RouterIP6.String())
	n.MustRun(tb, "ip", "route", "add", FarSubnet.String(), "via", RouterIP.String())
	n.MustRun(tb, "ip", "-6", "route", "add", FarSubnet6.String(), "via", RouterIP6.String())
}

// AttachFar gives n (on the switch) a second link, dev, on the far subnet
// at addr and addr6, in place of its route to the far subnet via the
// router: the node becomes on-link with the far nodes. DetachFar undoes
// it.
func (c *Cluster) AttachFar(tb testing.TB, n *Node, dev string, addr, addr6 netip.Addr) {
	tb.Helper()
	n.NS.MustRun(tb, "ip", "route", "del", FarSubnet.String(), "via", RouterIP.String())
	n.NS.MustRun(tb, "ip", "-6", "route", "del", FarSubnet6.String(), "via", RouterIP6.String())
	c.attach(tb, n.NS, "sw1", dev, netip.PrefixFrom(addr, FarSubnet.Bits()), netip.PrefixFrom(addr6, FarSubnet6.Bits()))
}

// DetachFar removes the link AttachFar made and puts the node's route to
// the far subnet back.
func (c *Cluster) DetachFar(tb testing.TB, n *Node, dev string) {
	tb.Helper()
	n.NS.MustRun(tb, "ip", "link", "del", dev)
	n.NS.MustRun(tb, "ip", "route", "add", FarSubnet.String(), "via", RouterIP.String())
	n.NS.MustRun(tb, "ip", "-6", "route", "add", FarSubnet6.String(), "via", RouterIP6.String())
}

// attach puts a veth from bridge (in the switch's namespace) into n as
// dev, with addr and addr6, without duplicate address detection.
func (c *Cluster) attach(tb testing.TB, n *netnstest.NS, bridge, dev string, addr, addr6 netip.Prefix) {
	tb.Helper()
	peer := "sw-" + n.Name[len(n.Name)-4:] + dev
	if len(peer) > 15 {
		peer = peer[:15]
	}
	c.Switch.MustRun(tb, "ip", "link", "add", peer, "type", "veth", "peer", "name", dev)
	c.Switch.MustRun(tb, "ip", "link", "set", dev, "netns", n.Name)
	c.Switch.MustRun(tb, "ip", "link", "set", peer, "master", bridge, "up")
	n.MustRun(tb, "sysctl", "-qw", "net.ipv6.conf."+dev+".accept_dad=0")
	n.MustRun(tb, "ip", "addr", "add", addr.String(), "dev", dev)
	n.MustRun(tb, "ip", "addr", "add", addr6.String(), "dev", dev, "nodad")
	n.MustRun(tb, "ip", "link", "set", dev, "up")
}

func mustIP(tb testing.TB, netns string, args ...string) {
	tb.Helper()
	ns := &netnstest.NS{Name: netns}
	ns.MustRun(tb, "ip", args...)
}

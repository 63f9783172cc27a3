package routes

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/privtest"
)

// tunnelNode is a node of the two-subnet topology of TestKernelVXLAN: its
// namespace, its underlay addresses and its pod subnets (on a bridge, with
// the gateway .1 / ::1 as the address a ping answers from).
type tunnelNode struct {
	name      string
	ns        *netnstest.NS
	ip4, ip6  netip.Addr
	pod, pod6 netip.Prefix
}

// twoSubnets makes a router namespace with two bridges, 192.168.77.0/24
// and fd77::/64 on one and 192.168.78.0/24 and fd78::/64 on the other, and
// node a on the first, node c on the second, each with a default route via
// the router. The router knows nothing of the pod subnets.
func twoSubnets(t testing.TB) (r *netnstest.NS, a, c tunnelNode) {
	privtest.Require(t, "ip", "ping")
	r = netnstest.New(t, "rtr")
	r.MustRun(t, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
	for _, s := range []string{"77", "78"} {
		r.MustRun(t, "ip", "link", "add", "br"+s, "type", "bridge")
		r.MustRun(t, "ip", "addr", "add", "192.168."+s+".1/24", "dev", "br"+s)
		r.MustRun(t, "ip", "addr", "add", "fd"+s+"::1/64", "dev", "br"+s, "nodad")
		r.MustRun(t, "ip", "link", "set", "br"+s, "up")
	}
	mk := func(name, subnet, i string) tunnelNode {
		n := tunnelNode{name: name, ns: netnstest.New(t, name),
			ip4:  netip.MustParseAddr("192.168." + subnet + "." + i),
			ip6:  netip.MustParseAddr("fd" + subnet + "::" + i),
			pod:  netip.MustParsePrefix("10.244." + i + ".0/24"),
			pod6: netip.MustParsePrefix("fd00:" + i + "::/64"),
		}
		attach(t, r, n.ns, "br"+subnet, "eth0", n.ip4, n.ip6)
		n.ns.MustRun(t, "ip", "route", "add", "default", "via", "192.168."+subnet+".1")
		n.ns.MustRun(t, "ip", "-6", "route", "add", "default", "via", "fd"+subnet+"::1")
		// And the other subnet by a route of its own, as nodes often
		// have: Linux refuses an IPv6 on-link gateway inside it.
		other := map[string]string{"77": "78", "78": "77"}[subnet]
		n.ns.MustRun(t, "ip", "route", "add", "192.168."+other+".0/24", "via", "192.168."+subnet+".1")
		n.ns.MustRun(t, "ip", "-6", "route", "add", "fd"+other+"::/64", "via", "fd"+subnet+"::1")
		n.ns.MustRun(t, "ip", "link", "add", "br0", "type", "bridge")
		n.ns.MustRun(t, "ip", "addr", "add", n.pod.Addr().Next().String()+"/24", "dev", "br0")
		n.ns.MustRun(t, "ip", "addr", "add", n.pod6.Addr().Next().String()+"/64", "dev", "br0", "nodad")
		n.ns.MustRun(t, "ip", "link", "set", "br0", "up")
		return n
	}
	return r, mk("a", "77", "11"), mk("c", "78", "13")
}

// attach puts a veth from the router's bridge into n as dev, with ip/24
// and ip6/64.
func attach(t testing.TB, r, n *netnstest.NS, bridge, dev string, ip4, ip6 netip.Addr) {
	t.Helper()
	peer := "p-" + n.Name[len(n.Name)-1:] + "-" + dev
	r.MustRun(t, "ip", "link", "add", peer, "type", "veth", "peer", "name", dev)
	r.MustRun(t, "ip", "link", "set", dev, "netns", n.Name)
	r.MustRun(t, "ip", "link", "set", peer, "master", bridge, "up")
	// No DAD of the link-local address either: neighbour solicitations
	// would wait for it.
	n.MustRun(t, "sysctl", "-qw", "net.ipv6.conf."+dev+".accept_dad=0")
	n.MustRun(t, "ip", "addr", "add", ip4.String()+"/24", "dev", dev)
	n.MustRun(t, "ip", "addr", "add", ip6.String()+"/64", "dev", dev, "nodad")
	n.MustRun(t, "ip", "link", "set", dev, "up")
}

// syncTunnel reconciles node n of nodes once, in its namespace, with a
// VXLAN tunnel on underlay address local, and fails tb on any error.
func syncTunnel(tb testing.TB, n tunnelNode, nodes []Node, local netip.Addr) Outcome {
	tb.Helper()
	var out Outcome
	err := n.ns.Do(func() error {
		tun, err := NewVXLAN(VXLANConfig{VNI: DefaultVXLANVNI, Port: DefaultVXLANPort, Local: local, MTU: 1500 - VXLANOverhead(local), Bridge: "br0"})
		if err != nil {
			return err
		}
		l := &Loop{Table: NewKernelTable(), Proto: DefaultProtocol, Tunnel: tun,
			Desired: func() Desired { return Compute(nodes, Policy{Self: n.name, Tunnel: true}) }}
		l.Init()
		out, err = l.Once()
		return err
	})
	if err != nil || out.TunnelErr != nil {
		tb.Fatalf("reconcile on %s: %v, tunnel: %v", n.name, err, out.TunnelErr)
	}
	return out
}

// TestKernelVXLAN: nodes on two subnets behind a router that knows nothing
// of pods reach each other's pod subnets, IPv4 and IPv6, through vmlane's
// VXLAN device, over an IPv4 and over an IPv6 underlay; a peer that becomes
// on-link gets a direct route and loses its tunnel entries, and gets them
// back when it is off-link again; RemoveVXLAN leaves nothing.
func TestKernelVXLAN(t *testing.T) {
	for _, underlay := range []string{"IPv4", "IPv6"} {
		t.Run(underlay+" underlay", func(t *testing.T) {
			r, a, c := twoSubnets(t)
			under := func(n tunnelNode) netip.Addr {
				if underlay == "IPv4" {
					return n.ip4
				}
				return n.ip6
			}
			nodes := []Node{
				{Name: "a", PodCIDRs: []netip.Prefix{a.pod, a.pod6}, Addrs: []netip.Addr{a.ip4, a.ip6}},
				{Name: "c", PodCIDRs: []netip.Prefix{c.pod, c.pod6}, Addrs: []netip.Addr{c.ip4, c.ip6}},
			}
			if underlay == "IPv6" {
				for i := range nodes {
					nodes[i].Addrs[0], nodes[i].Addrs[1] = nodes[i].Addrs[1], nodes[i].Addrs[0]
				}
			}
			sync := func(n tunnelNode) Outcome { t.Helper(); return syncTunnel(t, n, nodes, under(n)) }
			for _, n := range []tunnelNode{a, c} {
				if out := sync(n); len(out.Tunneled) != 2 || len(out.Unreachable) != 0 {
					t.Fatalf("node %s: tunneled %v, unreachable %v; want both pod subnets of the peer through the tunnel", n.name, out.Tunneled, out.Unreachable)
				}
			}
			routes := a.ns.MustRun(t, "ip", "route", "show", "10.244.13.0/24")
			if want := "10.244.13.0/24 via 10.244.13.0 dev vmlane.vxlan proto 77 onlink"; !strings.Contains(routes, want) {
				t.Errorf("node a's route to c's pods:\n%s\nwant %q", routes, want)
			}
			routes = a.ns.MustRun(t, "ip", "-6", "route", "show", "fd00:13::/64")
			if want := "fd00:13::/64 via fd00:13:: dev vmlane.vxlan proto 77"; !strings.Contains(routes, want) {
				t.Errorf("node a's route to c's IPv6 pods:\n%s\nwant %q", routes, want)
			}
			link := a.ns.MustRun(t, "ip", "-d", "link", "show", "vmlane.vxlan")
			for _, want := range []string{"vxlan id 30316", "dstport 4789", "nolearning", "0e:76:", "mtu " + strconv.Itoa(1500-VXLANOverhead(under(a)))} {
				if !strings.Contains(link, want) {
					t.Errorf("device lacks %q:\n%s", want, link)
				}
			}
			fdb := a.ns.MustRun(t, "bridge", "fdb", "show", "dev", "vmlane.vxlan")
			if want := VTEPMAC(under(c)).String() + " dst " + under(c).String(); !strings.Contains(fdb, want) {
				t.Errorf("FDB of a:\n%s\nwant %q", fdb, want)
			}
			ping := func(from tunnelNode, src, dst netip.Addr, size string) error {
				args := []string{"-c", "1", "-w", "5", "-I", src.String(), dst.String()} // the first packet may wait for neighbour discovery on a new underlay
				if size != "" {
					args = append([]string{"-M", "do", "-s", size}, args...)
				}
				_, err := from.ns.Run("ping", args...)
				return err
			}
			for _, p := range [][2]netip.Prefix{{a.pod, c.pod}, {a.pod6, c.pod6}} {
				if err := ping(a, p[0].Addr().Next(), p[1].Addr().Next(), ""); err != nil {
					t.Errorf("a to c's pods through the tunnel: %v\n%s", err, a.ns.MustRun(t, "ip", "neigh", "show", "dev", "vmlane.vxlan"))
				}
			}
			// The MTU end to end: a packet of the device's MTU with DF set
			// crosses, one byte more does not (the router's links are 1500).
			mtu := 1500 - VXLANOverhead(under(a))
			if err := ping(a, a.pod.Addr().Next(), c.pod.Addr().Next(), strconv.Itoa(mtu-28)); err != nil {
				t.Errorf("a DF ping of %d bytes through the tunnel: %v", mtu, err)
			}

			// c becomes on-link from a (a second link of a's on c's
			// subnet): a's routes to c go direct and its tunnel entries
			// for c go.
			a.ns.MustRun(t, "ip", "route", "del", "192.168.78.0/24", "via", "192.168.77.1")
			a.ns.MustRun(t, "ip", "-6", "route", "del", "fd78::/64", "via", "fd77::1")
			attach(t, r, a.ns, "br78", "eth1", netip.MustParseAddr("192.168.78.201"), netip.MustParseAddr("fd78::201"))
			if out := sync(a); len(out.Tunneled) != 0 {
				t.Errorf("c on-link: still tunneled %v", out.Tunneled)
			}
			routes = a.ns.MustRun(t, "ip", "route", "show", "10.244.13.0/24")
			if want := "10.244.13.0/24 via 192.168.78.13 dev eth1 proto 77"; !strings.Contains(routes, want) {
				t.Errorf("c on-link: route %q, want %q", routes, want)
			}
			if fdb := a.ns.MustRun(t, "bridge", "fdb", "show", "dev", "vmlane.vxlan"); strings.Contains(fdb, "dst") {
				t.Errorf("c on-link: FDB entries left:\n%s", fdb)
			}
			for _, p := range [][2]netip.Prefix{{a.pod, c.pod}, {a.pod6, c.pod6}} {
				if err := ping(a, p[0].Addr().Next(), p[1].Addr().Next(), ""); err != nil {
					t.Errorf("a to c's pods, direct: %v\n%s\n%s", err, a.ns.MustRun(t, "ip", "-6", "neigh"), c.ns.MustRun(t, "ip", "-6", "route"))
				}
			}
			// And back.
			a.ns.MustRun(t, "ip", "link", "del", "eth1")
			a.ns.MustRun(t, "ip", "route", "add", "192.168.78.0/24", "via", "192.168.77.1")
			a.ns.MustRun(t, "ip", "-6", "route", "add", "fd78::/64", "via", "fd77::1")
			if out := sync(a); len(out.Tunneled) != 2 {
				t.Errorf("c off-link again: tunneled %v, want 2", out.Tunneled)
			}
			for _, p := range [][2]netip.Prefix{{a.pod, c.pod}, {a.pod6, c.pod6}} {
				if err := ping(a, p[0].Addr().Next(), p[1].Addr().Next(), ""); err != nil {
					t.Errorf("a to c's pods through the tunnel again: %v", err)
				}
			}

			if err := a.ns.Do(func() error { _, err := RemoveVXLAN(""); return err }); err != nil {
				t.Fatal(err)
			}
			if routes := a.ns.MustRun(t, "ip", "route", "show", "proto", "77"); strings.Contains(routes, "vmlane.vxlan") {
				t.Errorf("routes through the device outlived it:\n%s", routes)
			}
		})
	}
}

// TestKernelVXLANConflict: a VXLAN device of another owner with vmlane's
// VNI on its port keeps vmlane's from being made; Ensure says which
// flags pick others, and touches the other device not at all.
func TestKernelVXLANConflict(t *testing.T) {
	privtest.Require(t, "ip")
	n := netnstest.New(t, "vxc")
	n.MustRun(t, "ip", "link", "add", "other", "type", "vxlan", "id", strconv.Itoa(DefaultVXLANVNI), "dstport", strconv.Itoa(DefaultVXLANPort), "local", "127.0.0.1", "nolearning")
	err := n.Do(func() error {
		tun, err := NewVXLAN(VXLANConfig{VNI: DefaultVXLANVNI, Port: DefaultVXLANPort, Local: netip.MustParseAddr("127.0.0.1"), MTU: 1450})
		if err != nil {
			return err
		}
		return tun.Ensure()
	})
	if err == nil || !strings.Contains(err.Error(), "pick others with --vxlan-port and --vxlan-vni") {
		t.Errorf("Ensure beside a device with the same VNI and port: %v", err)
	}
	if out := n.MustRun(t, "ip", "-d", "link", "show", "other"); !strings.Contains(out, "vxlan id "+strconv.Itoa(DefaultVXLANVNI)) {
		t.Errorf("the other device changed:\n%s", out)
	}
	if _, err := n.Run("ip", "link", "show", DefaultVXLANDevice); err == nil {
		t.Error("a half-made vmlane.vxlan is left")
	}
}

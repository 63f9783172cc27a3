package routes

import (
	"encoding/json"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/vmlane/vmlane/internal/testing/privtest"
)

// BenchmarkVXLANThroughput measures TCP throughput (Debian's iperf3, 3 s,
// one stream) between two nodes' pod subnets through vmlane's VXLAN device
// over an IPv4 underlay, and then, in the same run, over the direct route
// that replaces it once the nodes are on-link: the tunnel's cost is the
// ratio. Both paths cross veths and the router's bridge alike; the tunnel
// adds the encapsulation and its 50 bytes (MTU 1450 against 1500).
func BenchmarkVXLANThroughput(b *testing.B) {
	privtest.Require(b, "iperf3", "ip")
	r, a, c := twoSubnets(b)
	nodes := []Node{
		{Name: "a", PodCIDRs: []netip.Prefix{a.pod, a.pod6}, Addrs: []netip.Addr{a.ip4, a.ip6}},
		{Name: "c", PodCIDRs: []netip.Prefix{c.pod, c.pod6}, Addrs: []netip.Addr{c.ip4, c.ip6}},
	}
	sync := func(n tunnelNode) Outcome { return syncTunnel(b, n, nodes, n.ip4) }
	server := c.ns.Command("iperf3", "-s", "-B", c.pod.Addr().Next().String())
	if err := server.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { server.Process.Kill(); server.Wait() })
	time.Sleep(300 * time.Millisecond)
	run := func(what string) float64 {
		out, err := a.ns.Run("iperf3", "-J", "-t", "3", "-B", a.pod.Addr().Next().String(), "-c", c.pod.Addr().Next().String())
		if err != nil {
			b.Fatalf("iperf3 %s: %v", what, err)
		}
		var res struct {
			End struct {
				SumReceived struct {
					BitsPerSecond float64 `json:"bits_per_second"`
				} `json:"sum_received"`
			} `json:"end"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil || res.End.SumReceived.BitsPerSecond == 0 {
			b.Fatalf("iperf3 %s: %v\n%s", what, err, out)
		}
		return res.End.SumReceived.BitsPerSecond / 1e9
	}
	for _, n := range []tunnelNode{a, c} {
		if out := sync(n); len(out.Tunneled) != 2 {
			b.Fatalf("node %s: tunneled %v", n.name, out.Tunneled)
		}
	}
	b.ResetTimer()
	tunnel := run("through the tunnel")
	// On-link: a and c both get a link on the other's subnet, in place
	// of their routes via the router, and route each other directly.
	a.ns.MustRun(b, "ip", "route", "del", "192.168.78.0/24", "via", "192.168.77.1")
	a.ns.MustRun(b, "ip", "-6", "route", "del", "fd78::/64", "via", "fd77::1")
	attach(b, r, a.ns, "br78", "eth1", netip.MustParseAddr("192.168.78.201"), netip.MustParseAddr("fd78::201"))
	c.ns.MustRun(b, "ip", "route", "del", "192.168.77.0/24", "via", "192.168.78.1")
	c.ns.MustRun(b, "ip", "-6", "route", "del", "fd77::/64", "via", "fd78::1")
	attach(b, r, c.ns, "br77", "eth1", netip.MustParseAddr("192.168.77.203"), netip.MustParseAddr("fd77::203"))
	for _, n := range []tunnelNode{a, c} {
		if out := sync(n); len(out.Tunneled) != 0 {
			b.Fatalf("node %s on-link: still tunneled %v", n.name, out.Tunneled)
		}
	}
	direct := run("direct")
	b.StopTimer()
	b.ReportMetric(tunnel, "tunnel-Gbit/s")
	b.ReportMetric(direct, "direct-Gbit/s")
	b.ReportMetric(tunnel/direct, "tunnel/direct")
	b.Logf("iperf3, 3 s: through VXLAN %.2f Gbit/s, direct %.2f Gbit/s: %s of direct", tunnel, direct, strconv.FormatFloat(tunnel/direct, 'f', 2, 64))
}

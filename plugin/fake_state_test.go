package plugin

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vmlane/vmlane/internal/bridge"
)

// state prints the model, sorted, as the commands that would build it:
//
//	sysctl -w net.ipv4.ip_forward=1
//	ip link add vmlane0 type bridge
//	ip link set vmlane0 address 02:76:00:00:00:01 mtu 1500 up
//	ip addr add 10.244.3.1/24 dev vmlane0
//	ip link add vml… type veth peer name eth0 netns /run/netns/a
//	ip link set vml… master vmlane0 mtu 1500 up
//	ip -n /run/netns/a link set eth0 mtu 1500 addrgenmode none up
//	ip -n /run/netns/a tuntap add tap0 mode tap vnet_hdr one_queue
//	tc -n /run/netns/a qdisc add dev tap0 ingress
//	tc -n /run/netns/a filter add dev tap0 ingress prio 1 protocol all u32 match u32 0 0 action mirred egress redirect dev eth0
//
// Kernel-chosen MACs are left out, as `ip link add` leaves them out.
func (f *fakeDataplane) state() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	if f.forwarding {
		out = append(out, "sysctl -w net.ipv4.ip_forward=1")
	}
	if f.forwarding6 {
		out = append(out, "sysctl -w net.ipv6.conf.all.forwarding=1")
	}
	for k, l := range f.links {
		ip, tc := "ip ", "tc "
		if k.netns != "" {
			ip, tc = "ip -n "+k.netns+" ", "tc -n "+k.netns+" "
		}
		switch l.kind {
		case "veth":
			// One "add" line per pair, from its host end.
			if k.netns == "" {
				add := ip + "link add " + k.name + " type veth peer name " + l.peer.name
				if l.peer.netns != "" {
					add += " netns " + l.peer.netns
				}
				out = append(out, add)
			}
		case "tuntap":
			out = append(out, ip+"tuntap add "+k.name+" mode tap "+l.tapFlags)
		default:
			out = append(out, ip+"link add "+k.name+" type "+l.kind)
		}
		set := ip + "link set " + k.name
		if l.master != "" {
			set += " master " + l.master
		}
		if l.mac != "" {
			set += " address " + l.mac
		}
		set += fmt.Sprintf(" mtu %d", l.mtu)
		if l.quiet {
			set += " addrgenmode none"
		}
		if l.up {
			set += " up"
		} else {
			set += " down"
		}
		out = append(out, set)
		for _, a := range l.addrs {
			out = append(out, ip+"addr add "+a.String()+" dev "+k.name)
		}
		if l.gateway.IsValid() {
			out = append(out, ip+"route add default via "+l.gateway.String()+" dev "+k.name)
		}
		if l.gateway6.IsValid() {
			out = append(out, ip+"-6 route add default via "+l.gateway6.String()+" dev "+k.name)
		}
		if l.ingress {
			out = append(out, tc+"qdisc add dev "+k.name+" ingress")
		}
		if l.hairpin {
			out = append(out, "bridge link set dev "+k.name+" hairpin on")
		}
		if l.guardChain != "" {
			out = append(out, "nft add chain netdev "+l.guardChain+" "+k.name+" { type filter hook ingress device "+k.name+" priority -500; }")
		}
		for _, r := range l.redirects {
			if r == "" {
				r = "(none)"
			}
			out = append(out, tc+"filter add dev "+k.name+" ingress prio 1 protocol all u32 match u32 0 0 action mirred egress redirect dev "+r)
		}
	}
	for dst, br := range f.hostRoutes {
		out = append(out, fmt.Sprintf("ip route add %s dev %s proto 78 scope link", dst, br))
	}
	for _, p := range f.guards {
		out = append(out, fmt.Sprintf("nft add element bridge vmlane addrs { %s . %s . %s }", p.Name, p.MAC, p.IP))
		if p.IP6.IsValid() {
			out = append(out, fmt.Sprintf("nft add element bridge vmlane addrs6 { %s . %s . %s }", p.Name, p.MAC, p.IP6))
		}
	}
	slices.Sort(out)
	return out
}

// links lists the links of a netns ("" for the host's), sorted.
func (f *fakeDataplane) linkNames(netns string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for k := range f.links {
		if k.netns == netns {
			out = append(out, k.name)
		}
	}
	slices.Sort(out)
	return out
}

// TestFakeDataplane checks the fake against the kernel behaviour the
// plugin tests rely on.
func TestFakeDataplane(t *testing.T) {
	gw := netip.MustParsePrefix("10.0.0.1/24")
	build := func(t *testing.T) *fakeDataplane {
		f := newFakeDataplane()
		f.addNetns("/run/netns/p")
		if _, err := f.EnsureBridge("br0", gw, 1500, "02:76:0a:00:00:01"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := f.SetupVeth("/run/netns/p", "eth0", "vh", "br0", 1500, "", true, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := f.SetupTap("/run/netns/p", TapSpec{Name: "tap0", PodIf: "eth0", MTU: 1500}); err != nil {
			t.Fatal(err)
		}
		return f
	}
	brLines := []string{
		"ip addr add 10.0.0.1/24 dev br0",
		"ip link add br0 type bridge",
		"ip link set br0 address 02:76:0a:00:00:01 mtu 1500 up",
	}
	tap := []string{
		"ip -n /run/netns/p link set tap0 mtu 1500 addrgenmode none up",
		"ip -n /run/netns/p tuntap add tap0 mode tap vnet_hdr one_queue",
		"tc -n /run/netns/p filter add dev tap0 ingress prio 1 protocol all u32 match u32 0 0 action mirred egress redirect dev eth0",
		"tc -n /run/netns/p qdisc add dev tap0 ingress",
	}
	sorted := func(parts ...[]string) []string { return slices.Sorted(slices.Values(slices.Concat(parts...))) }

	t.Run("state", func(t *testing.T) {
		f := build(t)
		want := sorted(brLines, tap, []string{
			"ip -n /run/netns/p link set eth0 mtu 1500 addrgenmode none up",
			"ip link add vh type veth peer name eth0 netns /run/netns/p",
			"ip link set vh master br0 mtu 1500 up",
			"bridge link set dev vh hairpin on",
			"tc -n /run/netns/p filter add dev eth0 ingress prio 1 protocol all u32 match u32 0 0 action mirred egress redirect dev tap0",
			"tc -n /run/netns/p qdisc add dev eth0 ingress",
		})
		if diff := cmp.Diff(want, f.state()); diff != "" {
			t.Errorf("state (-want +got):\n%s", diff)
		}
	})
	t.Run("deleting the host end takes the peer", func(t *testing.T) {
		f := build(t)
		if err := f.DeleteHostLink("vh"); err != nil {
			t.Fatal(err)
		}
		if err := f.DeleteHostLink("vh"); err != nil {
			t.Fatalf("deleting a missing link: %v", err)
		}
		// The TAP's redirect stays, going nowhere, as in the kernel.
		dangling := slices.Clone(tap)
		dangling[2] = strings.Replace(dangling[2], "redirect dev eth0", "redirect dev (none)", 1)
		if diff := cmp.Diff(sorted(brLines, dangling), f.state()); diff != "" {
			t.Errorf("state (-want +got):\n%s", diff)
		}
	})
	t.Run("netns going takes its links and their peers", func(t *testing.T) {
		f := build(t)
		f.removeNetns("/run/netns/p")
		if diff := cmp.Diff(sorted(brLines), f.state()); diff != "" {
			t.Errorf("state (-want +got):\n%s", diff)
		}
		if err := f.DeleteNetnsLinks("/run/netns/p", "eth0", "tap0"); err != nil {
			t.Errorf("deleting in a missing netns: %v", err)
		}
		if err := f.CheckNetns("/run/netns/p"); !errors.Is(err, errNoNetns) {
			t.Errorf("CheckNetns of a missing netns: %v", err)
		}
	})
	t.Run("names are taken", func(t *testing.T) {
		f := build(t)
		if _, _, err := f.SetupVeth("/run/netns/p", "eth0", "vh2", "br0", 1500, "", false, nil); err == nil {
			t.Error("a second eth0 in one netns")
		}
		if _, err := f.SetupTap("/run/netns/p", TapSpec{Name: "eth0", PodIf: "eth0", MTU: 1500}); err == nil {
			t.Error("a TAP over a veth")
		}
		if _, err := f.SetupTap("/run/netns/p", TapSpec{Name: "tap0", PodIf: "eth0", MTU: 1500, MultiQueue: true}); err == nil {
			t.Error("a multi-queue TAP over a single-queue one")
		}
		f.addForeignLink("eth9", "device")
		var nb *bridge.NotBridgeError
		if _, err := f.EnsureBridge("eth9", gw, 1500, "02:76:0a:00:00:01"); !errors.As(err, &nb) || nb.Name != "eth9" || nb.Type != "device" {
			t.Errorf("EnsureBridge over a device: %v", err)
		}
	})
	t.Run("faults", func(t *testing.T) {
		f := newFakeDataplane()
		f.addNetns("/run/netns/p")
		f.failNth("EnsureBridge", 2, false)
		f.failNth("EnableForwarding", 1, true)
		if _, err := f.EnsureBridge("br0", gw, 1500, "02:76:0a:00:00:01"); err != nil {
			t.Fatalf("call 1: %v", err)
		}
		if _, err := f.EnsureBridge("br0", gw, 1400, "02:76:0a:00:00:01"); !errors.Is(err, errInjected) {
			t.Fatalf("call 2: %v", err)
		}
		if _, err := f.EnsureBridge("br0", gw, 1500, "02:76:0a:00:00:01"); err != nil {
			t.Fatalf("call 3: %v", err)
		}
		if err := f.EnableForwarding(); !errors.Is(err, errInjected) {
			t.Fatalf("partial fault: %v", err)
		}
		if !slices.Contains(f.state(), "sysctl -w net.ipv4.ip_forward=1") {
			t.Error("a partial fault did not do the work")
		}
		want := []string{
			"EnsureBridge(br0, 10.0.0.1/24, 1500, 02:76:0a:00:00:01)",
			"EnsureBridge(br0, 10.0.0.1/24, 1400, 02:76:0a:00:00:01)",
			"EnsureBridge(br0, 10.0.0.1/24, 1500, 02:76:0a:00:00:01)",
			"EnableForwarding()",
		}
		if diff := cmp.Diff(want, f.callLog()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
	})
}

package plugin

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/vishvananda/netlink"

	"github.com/vmlane/vmlane/internal/antispoof"
	"github.com/vmlane/vmlane/internal/netnstest"
	"github.com/vmlane/vmlane/internal/privtest"
)

// TestFakeMatchesKernel is the contract between the fake dataplane and the
// kernel: the same calls (a plain pod and a VM pod, as ADD makes them)
// go to netlinkDataplane in namespaces of the test's own and to the fake,
// the kernel's state is rendered in the fake's line format (kernelState),
// and the two must be equal line for line; so must what Observe reports
// of each attachment, which CHECK judges. A fake that drifts from the
// kernel fails here, not silently in the tests built on it.
func TestFakeMatchesKernel(t *testing.T) {
	privtest.Require(t, "ip")
	node := netnstest.New(t, "pnode")
	podA, podB := netnstest.New(t, "ppoda"), netnstest.New(t, "ppodb")
	real, fake := netlinkDataplane{}, newFakeDataplane()
	fake.addNetns(podA.Path)
	fake.addNetns(podB.Path)

	gw := netip.MustParsePrefix("10.77.0.1/24")
	plain := Attached{Bridge: Link{Name: "vmlt0"}, HostVeth: Link{Name: "vmlaaaa"}, PodVeth: Link{Name: "eth0"}}
	vm := Attached{Bridge: Link{Name: "vmlt0"}, HostVeth: Link{Name: "vmlbbbb"}, PodVeth: Link{Name: "eth0"}, Tap: &Link{Name: "tap0"}}
	addrA := netip.MustParsePrefix("10.77.0.2/24")
	guards := []antispoof.Port{
		{Name: "vmlaaaa", MAC: mustMAC(t, "02:76:0a:4d:00:02"), IP: addrA.Addr()},
		{Name: "vmlbbbb", MAC: mustMAC(t, "02:76:0a:4d:00:03"), IP: netip.MustParseAddr("10.77.0.3")},
	}
	peers := map[string]string{"vmlaaaa": podA.Path, "vmlbbbb": podB.Path}
	calls := func(dp dataplane) error {
		if _, err := dp.EnsureBridge("vmlt0", gw, 1400, "02:76:0a:4d:00:01"); err != nil {
			return err
		}
		if err := dp.EnableForwarding(); err != nil {
			return err
		}
		for _, g := range guards {
			if err := dp.Guard(g); err != nil {
				return err
			}
		}
		if _, _, err := dp.SetupVeth(podA.Path, "eth0", "vmlaaaa", "vmlt0", 1400, "02:76:0a:4d:00:02", false); err != nil {
			return err
		}
		if err := dp.ConfigureAddress(podA.Path, "eth0", addrA, gw.Addr()); err != nil {
			return err
		}
		if _, _, err := dp.SetupVeth(podB.Path, "eth0", "vmlbbbb", "vmlt0", 1400, "", true); err != nil {
			return err
		}
		_, err := dp.SetupTap(podB.Path, "tap0", "eth0", 1400, false)
		return err
	}
	if err := calls(fake); err != nil {
		t.Fatalf("fake: %v", err)
	}
	var kernel []string
	observed := map[string]Observed{}
	if err := node.Do(func() error {
		if err := calls(real); err != nil {
			return err
		}
		var err error
		if kernel, err = kernelState(real, podA.Path, podB.Path, peers); err != nil {
			return err
		}
		for name, a := range map[string]Attached{podA.Path: plain, podB.Path: vm} {
			if observed[name], err = real.Observe(name, a); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("kernel: %v", err)
	}
	if diff := cmp.Diff(fake.state(), kernel); diff != "" {
		t.Errorf("the fake's state differs from the kernel's (-fake +kernel):\n%s", diff)
	}
	for name, a := range map[string]Attached{podA.Path: plain, podB.Path: vm} {
		got, err := fake.Observe(name, a)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(got, observed[name], cmpopts.EquateComparable(netip.Prefix{})); diff != "" {
			t.Errorf("Observe of %s differs (-fake +kernel):\n%s", a.HostVeth.Name, diff)
		}
	}
}

func mustMAC(t *testing.T, s string) net.HardwareAddr {
	t.Helper()
	hw, err := net.ParseMAC(s)
	if err != nil {
		t.Fatal(err)
	}
	return hw
}

// kernelState renders the kernel's state in the fake's line format (see
// fakeDataplane.state): the current netns is the node's, podA holds the
// plain pod, podB the VM pod, and peers maps each host veth to its pod's
// netns. The fake prints only the MACs it was given (the bridge's, and a
// plain pod's veth's); so does this, leaving those the kernel picked.
func kernelState(dp netlinkDataplane, podA, podB string, peers map[string]string) ([]string, error) {
	var out []string
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); err == nil && strings.TrimSpace(string(b)) == "1" {
		out = append(out, "sysctl -w net.ipv4.ip_forward=1")
	}
	host, err := renderLinks("", map[string]bool{"vmlt0": true}, peers)
	if err != nil {
		return nil, err
	}
	out = append(out, host...)
	for _, p := range []struct {
		path string
		mac  bool
	}{{podA, true}, {podB, false}} {
		var lines []string
		err := ns.WithNetNSPath(p.path, func(ns.NetNS) error {
			var err error
			lines, err = renderLinks(p.path, map[string]bool{"eth0": p.mac}, nil)
			return err
		})
		if err != nil {
			return nil, err
		}
		out = append(out, lines...)
	}
	ports, err := dp.Guarded()
	if err != nil {
		return nil, err
	}
	for _, g := range ports {
		out = append(out, fmt.Sprintf("nft add element bridge vmlane addrs { %s . %s . %s }", g.Name, g.MAC, g.IP))
	}
	slices.Sort(out)
	return out, nil
}

// renderLinks renders the current netns's links but lo, as
// fakeDataplane.state does; netns is the path the fake names it by ("" for
// the node's), withMAC the links whose MAC the plugin set, peers the pod
// netns of each host veth.
func renderLinks(netns string, withMAC map[string]bool, peers map[string]string) ([]string, error) {
	ip, tc := "ip ", "tc "
	if netns != "" {
		ip, tc = "ip -n "+netns+" ", "tc -n "+netns+" "
	}
	links, err := netlinksafe.LinkList()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range links {
		a := l.Attrs()
		if a.Name == "lo" {
			continue
		}
		switch v := l.(type) {
		case *netlink.Veth:
			if netns == "" {
				peer, err := vethPeerName(l, peers[a.Name])
				if err != nil {
					return nil, err
				}
				out = append(out, ip+"link add "+a.Name+" type veth peer name "+peer+" netns "+peers[a.Name])
			}
		case *netlink.Tuntap:
			flags := "vnet_hdr one_queue"
			if v.Flags&netlink.TUNTAP_MULTI_QUEUE != 0 {
				flags = "vnet_hdr multi_queue"
			}
			if v.Flags&netlink.TUNTAP_VNET_HDR == 0 {
				flags = strings.TrimPrefix(flags, "vnet_hdr ")
			}
			out = append(out, ip+"tuntap add "+a.Name+" mode tap "+flags)
		default:
			out = append(out, ip+"link add "+a.Name+" type "+l.Type())
		}
		set := ip + "link set " + a.Name
		if a.MasterIndex != 0 {
			m, err := netlink.LinkByIndex(a.MasterIndex)
			if err != nil {
				return nil, err
			}
			set += " master " + m.Attrs().Name
		}
		if withMAC[a.Name] {
			set += " address " + a.HardwareAddr.String()
		}
		set += fmt.Sprintf(" mtu %d", a.MTU)
		if b, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + a.Name + "/addr_gen_mode"); err == nil && strings.TrimSpace(string(b)) == "1" {
			set += " addrgenmode none"
		}
		if a.Flags&1 != 0 {
			set += " up"
		} else {
			set += " down"
		}
		out = append(out, set)
		st, err := observeLink(a.Name, false)
		if err != nil {
			return nil, err
		}
		for _, p := range st.Addrs {
			out = append(out, ip+"addr add "+p.String()+" dev "+a.Name)
		}
		routes, err := netlinksafe.RouteList(l, netlink.FAMILY_V4)
		if err != nil {
			return nil, err
		}
		for _, r := range routes {
			if r.Dst == nil || r.Dst.IP.IsUnspecified() && isZeroMask(r.Dst.Mask) {
				if r.Gw != nil {
					out = append(out, ip+"route add default via "+r.Gw.String()+" dev "+a.Name)
				}
			}
		}
		qdiscs, err := netlinksafe.QdiscList(l)
		if err != nil {
			return nil, err
		}
		for _, q := range qdiscs {
			if _, ok := q.(*netlink.Ingress); ok {
				out = append(out, tc+"qdisc add dev "+a.Name+" ingress")
			}
		}
		if netns != "" {
			to, err := redirects(l)
			if err != nil {
				return nil, err
			}
			for _, r := range to {
				out = append(out, tc+"filter add dev "+a.Name+" ingress prio 1 protocol all u32 match u32 0 0 action mirred egress redirect dev "+r)
			}
		}
	}
	return out, nil
}

func isZeroMask(m []byte) bool { return !slices.ContainsFunc(m, func(b byte) bool { return b != 0 }) }

// vethPeerName is the name of a host veth's peer, read in the peer's
// netns (the kernel reports only its index).
func vethPeerName(l netlink.Link, netns string) (string, error) {
	idx, err := netlink.VethPeerIndex(l.(*netlink.Veth))
	if err != nil {
		return "", err
	}
	var name string
	err = ns.WithNetNSPath(netns, func(ns.NetNS) error {
		p, err := netlink.LinkByIndex(idx)
		if err == nil {
			name = p.Attrs().Name
		}
		return err
	})
	return name, err
}

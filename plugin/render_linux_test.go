package plugin

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/google/nftables"
	"github.com/vmlane/vmlane/internal/antispoof"
)

// renderKernel prints the kernel's state in the fake's line format (see
// fakeDataplane.state), read back by netlink with none of the plugin's
// own reading code, so a bug there cannot hide one in the fake. The
// current netns is the node's; podA and podB are the pods' netns, named
// by path as the fake names them. Links a netns was born with (baseline,
// by netns) are left out. The fake prints only the MACs it was given (the
// bridge's, and a plain pod's veth's), so this prints those alone.
func renderKernel(podA, podB string, baseline map[string]map[string]bool) ([]string, error) {
	var out []string
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); err != nil {
		return nil, err
	} else if strings.TrimSpace(string(b)) == "1" {
		out = append(out, "sysctl -w net.ipv4.ip_forward=1")
	}
	host, err := renderLinks("", baseline[""], map[string]bool{"vmlt0": true}, map[string]bool{podA: true, podB: true})
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
			lines, err = renderLinks(p.path, baseline[p.path], map[string]bool{"eth0": p.mac}, nil)
			return err
		})
		if err != nil {
			return nil, err
		}
		out = append(out, lines...)
	}
	ports, err := antispoof.Table{}.Ports()
	if err != nil {
		return nil, err
	}
	for _, g := range ports {
		out = append(out, fmt.Sprintf("nft add element bridge vmlane addrs { %s . %s . %s }", g.Name, g.MAC, g.IP))
	}
	chains, err := ingressChains()
	if err != nil {
		return nil, err
	}
	for _, name := range chains {
		out = append(out, "nft add chain netdev vmlane "+name+" { type filter hook ingress device "+name+" priority -500; }")
	}
	slices.Sort(out)
	return out, nil
}

// ingressChains names the chains of the netdev table vmlane whose link
// exists. Kernels differ on a chain whose link went (before Linux 6.16 it
// goes with the link, later it stays unbound until vmlaned's sync removes
// it): neither world prints those.
func ingressChains() ([]string, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, err
	}
	all, err := c.ListChainsOfTableFamily(nftables.TableFamilyNetdev)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, ch := range all {
		if ch.Table.Name != "vmlane" {
			continue
		}
		if _, err := netlinksafe.LinkByName(ch.Name); err == nil {
			out = append(out, ch.Name)
		}
	}
	return out, nil
}

// linkSets names the links of the current netns ("") and of each netns
// path given.
func linkSets(netns ...string) (map[string]map[string]bool, error) {
	out := map[string]map[string]bool{}
	for _, n := range netns {
		names := func() error {
			links, err := netlinksafe.LinkList()
			if err != nil {
				return err
			}
			out[n] = map[string]bool{}
			for _, l := range links {
				out[n][l.Attrs().Name] = true
			}
			return nil
		}
		var err error
		if n == "" {
			err = names()
		} else {
			err = ns.WithNetNSPath(n, func(ns.NetNS) error { return names() })
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// renderLinks renders the current netns's links but those in skip, as
// fakeDataplane.state does. netns is the path the fake names it by (""
// for the node's), withMAC the links whose MAC the plugin set, pods the
// netns a host veth's peer may be in.
func renderLinks(netns string, skip, withMAC, pods map[string]bool) ([]string, error) {
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
		if skip[a.Name] {
			continue
		}
		switch v := l.(type) {
		case *netlink.Veth:
			if netns == "" {
				peer, where, err := vethPeer(l, pods)
				if err != nil {
					return nil, err
				}
				out = append(out, ip+"link add "+a.Name+" type veth peer name "+peer+" netns "+where)
			}
		case *netlink.Tuntap:
			out = append(out, ip+"tuntap add "+a.Name+" mode tap "+tapFlags(v.Flags))
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
		// /proc/sys/net is the reading thread's netns's.
		if b, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + a.Name + "/addr_gen_mode"); err == nil && strings.TrimSpace(string(b)) == "1" {
			set += " addrgenmode none"
		}
		if a.Flags&unix.IFF_UP != 0 {
			set += " up"
		} else {
			set += " down"
		}
		out = append(out, set)
		if a.MasterIndex != 0 {
			if pi, err := netlink.LinkGetProtinfo(l); err == nil && pi.Hairpin {
				out = append(out, "bridge link set dev "+a.Name+" hairpin on")
			}
		}
		lines, err := renderL3(ip, l)
		if err != nil {
			return nil, err
		}
		out = append(out, lines...)
		if lines, err = renderTC(tc, l); err != nil {
			return nil, err
		}
		out = append(out, lines...)
	}
	return out, nil
}

// tapFlags prints a TAP's flags as `ip tuntap add` takes them. The kernel
// does not report IFF_ONE_QUEUE (it ignores it), so a TAP that is not
// multi-queue prints one_queue, as the plugin asks for.
func tapFlags(f netlink.TuntapFlag) string {
	var out []string
	if f&netlink.TUNTAP_NO_PI == 0 {
		out = append(out, "pi")
	}
	if f&netlink.TUNTAP_VNET_HDR != 0 {
		out = append(out, "vnet_hdr")
	}
	if f&netlink.TUNTAP_MULTI_QUEUE != 0 {
		out = append(out, "multi_queue")
	} else {
		out = append(out, "one_queue")
	}
	return strings.Join(out, " ")
}

// renderL3 prints l's IPv4 addresses and the routes of the main table out
// of it, but the kernel's own (proto kernel: an address's subnet), which
// `ip addr add` implies.
func renderL3(ip string, l netlink.Link) ([]string, error) {
	name := l.Attrs().Name
	addrs, err := netlinksafe.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, a := range addrs {
		out = append(out, ip+"addr add "+a.IPNet.String()+" dev "+name)
	}
	routes, err := netlinksafe.RouteList(l, netlink.FAMILY_V4)
	if err != nil {
		return nil, err
	}
	for _, r := range routes {
		if r.Protocol == unix.RTPROT_KERNEL {
			continue
		}
		dst := "default"
		if r.Dst != nil {
			if ones, _ := r.Dst.Mask.Size(); ones != 0 || !r.Dst.IP.IsUnspecified() {
				dst = r.Dst.String()
			}
		}
		line := ip + "route add " + dst
		if r.Gw != nil {
			line += " via " + r.Gw.String()
		}
		out = append(out, line+" dev "+name)
	}
	return out, nil
}

// renderTC prints l's qdiscs but the kernel's defaults, and every filter
// of its ingress qdisc with its priority, protocol, u32 keys and actions.
func renderTC(tc string, l netlink.Link) ([]string, error) {
	name := l.Attrs().Name
	qdiscs, err := netlinksafe.QdiscList(l)
	if err != nil {
		return nil, err
	}
	var out []string
	ingress := false
	for _, q := range qdiscs {
		switch q.Type() {
		case "noqueue", "noop", "pfifo_fast", "fq_codel", "mq":
		case "ingress":
			ingress = true
			out = append(out, tc+"qdisc add dev "+name+" ingress")
		default:
			out = append(out, tc+"qdisc add dev "+name+" "+q.Type())
		}
	}
	if !ingress {
		return out, nil
	}
	filters, err := netlinksafe.FilterList(l, ingressHandle)
	if err != nil {
		return nil, err
	}
	for _, f := range filters {
		a := f.Attrs()
		proto := fmt.Sprintf("0x%04x", a.Protocol)
		if a.Protocol == unix.ETH_P_ALL {
			proto = "all"
		}
		line := fmt.Sprintf("%sfilter add dev %s ingress prio %d protocol %s %s", tc, name, a.Priority, proto, f.Type())
		u, ok := f.(*netlink.U32)
		if !ok {
			out = append(out, line)
			continue
		}
		if u.Sel != nil {
			for _, k := range u.Sel.Keys {
				line += fmt.Sprintf(" match u32 %d %d", k.Val, k.Mask)
				if k.Off != 0 {
					line += fmt.Sprintf(" at %d", k.Off)
				}
			}
		}
		for _, act := range u.Actions {
			m, ok := act.(*netlink.MirredAction)
			if !ok {
				line += " action " + act.Type()
				continue
			}
			how := map[netlink.MirredAct]string{
				netlink.TCA_EGRESS_REDIR: "egress redirect", netlink.TCA_EGRESS_MIRROR: "egress mirror",
				netlink.TCA_INGRESS_REDIR: "ingress redirect", netlink.TCA_INGRESS_MIRROR: "ingress mirror",
			}[m.MirredAction]
			dev := "(none)"
			if to, err := netlink.LinkByIndex(m.Ifindex); err == nil {
				dev = to.Attrs().Name
			}
			line += " action mirred " + how + " dev " + dev
		}
		out = append(out, line)
	}
	return out, nil
}

// vethPeer finds a host veth's peer in one of the pods' netns (the kernel
// reports only its index, which means nothing in this netns).
func vethPeer(l netlink.Link, pods map[string]bool) (name, netns string, err error) {
	idx, err := netlink.VethPeerIndex(l.(*netlink.Veth))
	if err != nil {
		return "", "", err
	}
	for p := range pods {
		err := ns.WithNetNSPath(p, func(ns.NetNS) error {
			pl, err := netlink.LinkByIndex(idx)
			if err != nil {
				return nil
			}
			// An index is unique only within a netns: the peer is the
			// veth there whose own peer is l.
			if v, ok := pl.(*netlink.Veth); ok {
				if back, err := netlink.VethPeerIndex(v); err == nil && back == l.Attrs().Index {
					name, netns = pl.Attrs().Name, p
				}
			}
			return nil
		})
		if err != nil {
			return "", "", err
		}
	}
	if name == "" {
		return "", "", fmt.Errorf("no peer of %s in the pods' netns", l.Attrs().Name)
	}
	return name, netns, nil
}

// Command netlinkfloor is the floor of cnibench's CNI ADD rows: a CNI
// plugin that makes what a vmlane ADD makes in the kernel, the fewest
// netlink calls it takes, and nothing else. A veth whose host end joins
// the bridge (created once) and whose pod end is ifname; in plain mode the
// pod's address and default route, in VM mode (the config's "vm") a TAP
// joined to the pod end by an ingress qdisc and a match-all u32 mirred
// redirect each way. No config checks, no lease store (the address comes
// from the container ID), no anti-spoofing, no log. DEL deletes the host
// end, which takes the pod end with it, and the TAP.
//
// It is run by libcni like any plugin, so vmlane's ratio to it is what
// vmlane adds to the kernel's work and to a plugin's process start.
package main

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/vmlane/vmlane/internal/netaddr"
)

type conf struct {
	types.PluginConf
	Bridge string `json:"bridge"`
	Subnet string `json:"subnet"`
	VM     bool   `json:"vm"`
}

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{Add: add, Del: del, Check: func(*skel.CmdArgs) error { return nil }},
		version.All, "netlinkfloor: cnibench's floor")
}

// hostName is the host end's name, from the container ID and ifname.
func hostName(args *skel.CmdArgs) string {
	h := fnv.New32a()
	h.Write([]byte(args.ContainerID + "/" + args.IfName))
	return fmt.Sprintf("nlf%08x", h.Sum32())
}

func add(args *skel.CmdArgs) error {
	var c conf
	if err := json.Unmarshal(args.StdinData, &c); err != nil {
		return err
	}
	subnet, err := netip.ParsePrefix(c.Subnet)
	if err != nil {
		return err
	}
	gw := subnet.Addr().Next()
	br, err := netlink.LinkByName(c.Bridge)
	if err != nil {
		b := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: c.Bridge}}
		if err := netlink.LinkAdd(b); err != nil {
			return err
		}
		if err := netlink.AddrAdd(b, &netlink.Addr{IPNet: netaddr.IPNet(netip.PrefixFrom(gw, subnet.Bits()))}); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(b); err != nil {
			return err
		}
		br = b
	}
	netns, err := ns.GetNS(args.Netns)
	if err != nil {
		return err
	}
	defer netns.Close()
	host := hostName(args)
	v := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: host, MasterIndex: br.Attrs().Index, Flags: net.FlagUp},
		PeerName:      args.IfName,
		PeerNamespace: netlink.NsFd(int(netns.Fd())),
	}
	if err := netlink.LinkAdd(v); err != nil {
		return err
	}
	h := fnv.New32a()
	h.Write([]byte(args.ContainerID))
	ip := subnet.Addr().As4()
	n := 2 + h.Sum32()%60000
	ip[2], ip[3] = byte(n>>8), byte(n)
	addr := netip.PrefixFrom(netip.AddrFrom4(ip), subnet.Bits())
	err = netns.Do(func(ns.NetNS) error {
		pod, err := netlink.LinkByName(args.IfName)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(pod); err != nil {
			return err
		}
		if !c.VM {
			if err := netlink.AddrAdd(pod, &netlink.Addr{IPNet: netaddr.IPNet(addr)}); err != nil {
				return err
			}
			return netlink.RouteAdd(&netlink.Route{LinkIndex: pod.Attrs().Index, Gw: gw.AsSlice()})
		}
		tap := &netlink.Tuntap{
			LinkAttrs: netlink.LinkAttrs{Name: "tap0"},
			Mode:      netlink.TUNTAP_MODE_TAP,
			Flags:     netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR | netlink.TUNTAP_ONE_QUEUE,
		}
		if err := netlink.LinkAdd(tap); err != nil {
			return err
		}
		t, err := netlink.LinkByName("tap0")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(t); err != nil {
			return err
		}
		for _, p := range [][2]netlink.Link{{t, pod}, {pod, t}} {
			if err := redirect(p[0], p[1]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	r := &current.Result{CNIVersion: current.ImplementedSpecVersion,
		Interfaces: []*current.Interface{{Name: args.IfName, Sandbox: args.Netns}},
		IPs:        []*current.IPConfig{{Interface: current.Int(0), Address: *netaddr.IPNet(addr), Gateway: gw.AsSlice()}}}
	return types.PrintResult(r, c.CNIVersion)
}

// redirect sends every frame from from out of to: an ingress qdisc and a
// match-all u32 filter with a mirred egress redirect, as vmlane's.
func redirect(from, to netlink.Link) error {
	if err := netlink.QdiscAdd(&netlink.Ingress{QdiscAttrs: netlink.QdiscAttrs{
		LinkIndex: from.Attrs().Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_INGRESS}}); err != nil {
		return err
	}
	return netlink.FilterAdd(&netlink.U32{
		FilterAttrs: netlink.FilterAttrs{LinkIndex: from.Attrs().Index, Parent: netlink.MakeHandle(0xffff, 0), Priority: 1, Protocol: unix.ETH_P_ALL},
		Sel:         &netlink.TcU32Sel{Flags: netlink.TC_U32_TERMINAL, Keys: []netlink.TcU32Key{{}}},
		Actions: []netlink.Action{&netlink.MirredAction{ActionAttrs: netlink.ActionAttrs{Action: netlink.TC_ACT_STOLEN},
			MirredAction: netlink.TCA_EGRESS_REDIR, Ifindex: to.Attrs().Index}},
	})
}

func del(args *skel.CmdArgs) error {
	if l, err := netlink.LinkByName(hostName(args)); err == nil {
		if err := netlink.LinkDel(l); err != nil {
			return err
		}
	}
	if args.Netns == "" {
		return nil
	}
	netns, err := ns.GetNS(args.Netns)
	if err != nil {
		return nil // the netns is gone, and its links with it
	}
	defer netns.Close()
	return netns.Do(func(ns.NetNS) error {
		if t, err := netlink.LinkByName("tap0"); err == nil {
			return netlink.LinkDel(t)
		}
		return nil
	})
}

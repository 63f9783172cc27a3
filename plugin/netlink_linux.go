package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/vmlane/vmlane/internal/antispoof"
	"github.com/vmlane/vmlane/internal/bridge"
	"github.com/vmlane/vmlane/internal/kernel"
	"github.com/vmlane/vmlane/internal/sysctl"
	"github.com/vmlane/vmlane/leases"
)

// netlinkDataplane is the Linux dataplane: netlink for links, addresses,
// routes and tc, pkg/ns to enter the pod's netns. List and dump calls go
// through netlinksafe, which retries netlink.ErrDumpInterrupted.
type netlinkDataplane struct{}

func newDataplane() dataplane { return netlinkDataplane{} }

// ingressHandle is the ingress qdisc's handle, ffff:.
var ingressHandle = netlink.MakeHandle(0xffff, 0)

// in6AddrGenModeNone stops the kernel giving a link an IPv6 link-local
// address (IFLA_INET6_ADDR_GEN_MODE, linux/if_link.h), so a link that only
// relays a guest's frames never sends router solicitations or MLD reports
// of its own.
const in6AddrGenModeNone = 1

func isNotFound(err error) bool { return bridge.IsNotFound(err) }

func (netlinkDataplane) DefaultMTU() int { return bridge.DefaultRouteMTU() }

func (netlinkDataplane) CheckNetns(path string) error {
	if path == "" {
		return fmt.Errorf("%w: CNI_NETNS is empty", errNoNetns)
	}
	n, err := ns.GetNS(path)
	if err != nil {
		return fmt.Errorf("%w: %v", errNoNetns, err)
	}
	return n.Close()
}

func (netlinkDataplane) EnsureBridge(name string, gw netip.Prefix, mtu int, mac string) (Link, error) {
	got, err := bridge.Ensure(name, gw, mtu, mac)
	if err != nil {
		return Link{}, err
	}
	return Link{Name: name, MAC: got, MTU: mtu}, nil
}

func (netlinkDataplane) EnsureBridgeAddr(name string, gw netip.Prefix) error {
	return bridge.EnsureAddr(name, gw)
}

// EnableForwarding6 sets net.ipv6.conf.all.forwarding in the host netns,
// writing only when it is off.
func (netlinkDataplane) EnableForwarding6() error {
	_, err := sysctl.EnsureForwarding(sysctl.Proc{}, sysctl.LinuxIPv6Forwarding)
	return err
}

func (netlinkDataplane) EnableProxy(bridgeName string) error {
	return sysctl.Ensure(sysctl.Proc{}, sysctl.BridgeProxy(bridgeName))
}

// EnableForwarding sets net.ipv4.ip_forward in the netns the plugin runs
// in (the host's), writing only when it is off.
func (netlinkDataplane) EnableForwarding() error {
	_, err := sysctl.EnsureForwarding(sysctl.Proc{}, sysctl.LinuxIPv4Forwarding)
	return err
}

func (netlinkDataplane) SetupVeth(netnsPath, podIf, hostIf, bridge string, mtu int, podMAC string, quiet bool, guard *VethGuard) (Link, Link, error) {
	netns, err := ns.GetNS(netnsPath)
	if err != nil {
		return Link{}, Link{}, err
	}
	defer netns.Close()
	br, err := netlinksafe.LinkByName(bridge)
	if err != nil {
		return Link{}, Link{}, fmt.Errorf("bridge %s: %w", bridge, err)
	}
	v := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: hostIf, MTU: mtu, TxQLen: -1},
		PeerName:      podIf,
		PeerNamespace: netlink.NsFd(int(netns.Fd())),
		PeerMTU:       uint32(mtu),
	}
	if podMAC != "" {
		if v.PeerHardwareAddr, err = net.ParseMAC(podMAC); err != nil {
			return Link{}, Link{}, err
		}
	}
	if err := netlink.LinkAdd(v); err != nil {
		if errors.Is(err, syscall.EEXIST) {
			return Link{}, Link{}, fmt.Errorf("%s or %s already exists in the pod: %w", hostIf, podIf, err)
		}
		return Link{}, Link{}, fmt.Errorf("creating veth %s: %w", hostIf, kernel.Explain(err, kernel.Veth))
	}
	host, err := netlinksafe.LinkByName(hostIf)
	if err != nil {
		return Link{}, Link{}, err
	}
	if guard != nil {
		if err := guardTable(guard.Table).Attach(guard.Port); err != nil {
			return Link{}, Link{}, fmt.Errorf("checking %s's ingress: %w", hostIf, err)
		}
	}
	if err := netlink.LinkSetMaster(host, br); err != nil {
		return Link{}, Link{}, fmt.Errorf("joining %s to %s: %w", hostIf, bridge, err)
	}
	// Hairpin: a pod that reaches a Service it backs gets its packet
	// back through its own port. With br_netfilter (kube-proxy's iptables
	// and IPVS modes want it), the DNAT happens as the frame crosses the
	// bridge, which then forwards it out the port it came in on, and drops
	// it unless the port has hairpin on (the reference bridge plugin's
	// hairpinMode). The frame goes out to the pod: anti-spoofing, which
	// checks what comes in from a port, is not in its way.
	if err := netlink.LinkSetHairpin(host, true); err != nil {
		return Link{}, Link{}, fmt.Errorf("setting hairpin on %s: %w", hostIf, err)
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return Link{}, Link{}, err
	}
	var pod Link
	err = netns.Do(func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName(podIf)
		if err != nil {
			return err
		}
		if quiet {
			quietLink(l)
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
		pod = Link{Name: podIf, MAC: l.Attrs().HardwareAddr.String(), MTU: mtu, Sandbox: netnsPath}
		return nil
	})
	if err != nil {
		return Link{}, Link{}, fmt.Errorf("in pod netns: %w", err)
	}
	return Link{Name: hostIf, MAC: host.Attrs().HardwareAddr.String(), MTU: mtu}, pod, nil
}

// quietLink turns off IPv6 link-local autoconfiguration. Kernels without
// IPv6 refuse the setting, and then there is nothing to quiet.
func quietLink(l netlink.Link) {
	_ = netlink.LinkSetIP6AddrGenMode(l, in6AddrGenModeNone)
}

func (netlinkDataplane) ConfigureAddress(netnsPath, podIf string, addr netip.Prefix, gw netip.Addr) error {
	return ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName(podIf)
		if err != nil {
			return err
		}
		a := &netlink.Addr{IPNet: &net.IPNet{IP: addr.Addr().AsSlice(), Mask: net.CIDRMask(addr.Bits(), addr.Addr().BitLen())}}
		if addr.Addr().Is6() {
			a.Flags = unix.IFA_F_NODAD
		}
		if err := netlink.AddrAdd(l, a); err != nil && !errors.Is(err, syscall.EEXIST) {
			return fmt.Errorf("adding address: %w", err)
		}
		r := &netlink.Route{LinkIndex: l.Attrs().Index, Gw: gw.AsSlice(), Scope: netlink.SCOPE_UNIVERSE}
		if err := netlink.RouteReplace(r); err != nil {
			return fmt.Errorf("adding default route via %s: %w", gw, err)
		}
		return nil
	})
}

func (netlinkDataplane) SetupTap(netnsPath string, spec TapSpec) (Link, error) {
	tap, podIf, mtu := spec.Name, spec.PodIf, spec.MTU
	var out Link
	err := ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		// vnet header on: virtio-net guests hand the host offloaded
		// (GSO/checksum-partial) frames through it. No packet-info
		// header. Opened by spec's owner and group, or with
		// CAP_NET_ADMIN; persistent until DEL deletes it.
		flags := netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR
		if spec.MultiQueue {
			flags |= netlink.TUNTAP_MULTI_QUEUE
		} else {
			flags |= netlink.TUNTAP_ONE_QUEUE
		}
		t := &netlink.Tuntap{
			LinkAttrs: netlink.LinkAttrs{Name: tap, MTU: mtu},
			Mode:      netlink.TUNTAP_MODE_TAP,
			Flags:     flags,
			Owner:     spec.Owner,
			Group:     spec.Group,
		}
		if err := netlink.LinkAdd(t); err != nil {
			return fmt.Errorf("creating: %w", kernel.Explain(err, kernel.Tun))
		}
		tl, err := netlinksafe.LinkByName(tap)
		if err != nil {
			return err
		}
		quietLink(tl)
		if err := netlink.LinkSetMTU(tl, mtu); err != nil {
			return fmt.Errorf("setting MTU: %w", err)
		}
		if err := netlink.LinkSetUp(tl); err != nil {
			return err
		}
		pl, err := netlinksafe.LinkByName(podIf)
		if err != nil {
			return err
		}
		// One link group for the pair, so DEL removes both in one kernel
		// batch (see deleteGroup).
		g := linkGroup(podIf, tap)
		if err := netlink.LinkSetGroup(tl, int(g)); err != nil {
			return fmt.Errorf("setting link group: %w", err)
		}
		if err := netlink.LinkSetGroup(pl, int(g)); err != nil {
			return fmt.Errorf("setting link group: %w", err)
		}
		// Frames arriving on either side leave by the other unchanged:
		// the guest's MAC, VLAN tags and all, as on a wire.
		if err := redirect(tl, pl); err != nil {
			return err
		}
		if err := redirect(pl, tl); err != nil {
			return err
		}
		out = Link{Name: tap, MTU: mtu, Sandbox: netnsPath}
		return nil
	})
	return out, err
}

func (netlinkDataplane) TapHolder(netnsPath, tap, podIf string) (TapState, error) {
	var st TapState
	err := ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName(tap)
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		if err != nil {
			return err
		}
		st.Exists = true
		if l.Type() != "tuntap" {
			return nil
		}
		// SetupTap puts its TAPs in a link group of their own, whose
		// high bit is set (linkGroup), and redirects their frames.
		to, err := redirects(l)
		if err != nil {
			return err
		}
		g := l.Attrs().Group
		st.Vmlane, st.Mine = g&vmlaneGroups != 0 || len(to) > 0, g == linkGroup(podIf, tap)
		for _, name := range to {
			if name != "" {
				st.Holder = name
			}
		}
		return nil
	})
	return st, err
}

// redirect sends every frame received on from out of to: an ingress qdisc
// on from with a filter that matches everything and whose action is mirred
// egress redirect. The filter is u32 with one all-zero key rather than
// matchall: cls_matchall is an optional module that some kernels (this
// project's CI among them) lack, and u32 is everywhere; Kata Containers'
// tc-redirect does the same.
//
// A TAP that outlived its veth keeps its ingress qdisc, and its filter
// redirects to a device that is gone, which drops every frame the guest
// sends; the kernel refuses to replace an ingress qdisc (EINVAL), so
// one that is there is deleted, filters and all, and made anew.
func redirect(from, to netlink.Link) error {
	q := &netlink.Ingress{QdiscAttrs: netlink.QdiscAttrs{
		LinkIndex: from.Attrs().Index,
		Handle:    ingressHandle,
		Parent:    netlink.HANDLE_INGRESS,
	}}
	err := netlink.QdiscAdd(q)
	if errors.Is(err, syscall.EEXIST) {
		if err = netlink.QdiscDel(q); err == nil {
			err = netlink.QdiscAdd(q)
		}
	}
	if err != nil {
		return fmt.Errorf("adding ingress qdisc on %s: %w", from.Attrs().Name, kernel.Explain(err, kernel.Ingress))
	}
	f := &netlink.U32{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: from.Attrs().Index,
			Parent:    ingressHandle,
			Priority:  1,
			Protocol:  unix.ETH_P_ALL,
		},
		Sel: &netlink.TcU32Sel{
			Flags: netlink.TC_U32_TERMINAL,
			Nkeys: 1,
			Keys:  []netlink.TcU32Key{{Mask: 0, Val: 0, Off: 0}},
		},
		Actions: []netlink.Action{netlink.NewMirredAction(to.Attrs().Index)},
	}
	if err := netlink.FilterReplace(f); err != nil {
		return fmt.Errorf("adding redirect %s -> %s: %w", from.Attrs().Name, to.Attrs().Name, kernel.Explain(err, kernel.Redirect))
	}
	return nil
}

func (netlinkDataplane) DeleteHostLink(name string) error {
	l, err := netlinksafe.LinkByName(name)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("looking up %s: %w", name, err)
	}
	if err := netlink.LinkDel(l); err != nil && !isNotFound(err) {
		return fmt.Errorf("deleting %s: %w", name, err)
	}
	return nil
}

func (netlinkDataplane) DeleteNetnsLinks(netnsPath string, names ...string) error {
	netns, err := ns.GetNS(netnsPath)
	if err != nil {
		return nil // the netns is gone, and its links with it
	}
	defer netns.Close()
	return netns.Do(func(ns.NetNS) error {
		var links []netlink.Link
		for _, name := range names {
			l, err := netlinksafe.LinkByName(name)
			if isNotFound(err) {
				continue
			}
			if err != nil {
				return fmt.Errorf("looking up %s in %s: %w", name, netnsPath, err)
			}
			links = append(links, l)
		}
		if deleteGroup(links) {
			return nil
		}
		var errs []error
		for _, l := range links {
			if err := netlink.LinkDel(l); err != nil && !isNotFound(err) {
				errs = append(errs, fmt.Errorf("deleting %s in %s: %w", l.Attrs().Name, netnsPath, err))
			}
		}
		return errors.Join(errs...)
	})
}

// linkGroup is the link group of a VM attachment's pod veth and TAP: a
// hash of their names, which are unique within the pod netns, with the top
// bit set to keep clear of the small group numbers people assign by hand.
func linkGroup(podIf, tap string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(podIf + "/" + tap))
	return h.Sum32() | vmlaneGroups
}

// vmlaneGroups is the bit every link group linkGroup makes has set.
const vmlaneGroups = 0x80000000

// deleteGroup deletes links in one RTM_DELLINK by group (`ip link delete
// group G`) when they are exactly the members of one vmlane link group.
// The kernel then tears them down in one batch and waits for the network
// core once, where one delete per link waits once per link: that halves a
// VM pod's DEL. It reports false, having changed nothing, when the links
// are not such a group or the kernel refuses, and the caller deletes them
// one by one.
func deleteGroup(links []netlink.Link) bool {
	if len(links) < 2 {
		return false
	}
	g := links[0].Attrs().Group
	if g&0x80000000 == 0 {
		return false
	}
	for _, l := range links[1:] {
		if l.Attrs().Group != g {
			return false
		}
	}
	all, err := netlinksafe.LinkList()
	if err != nil {
		return false
	}
	members := 0
	for _, l := range all {
		if l.Attrs().Group == g {
			members++
		}
	}
	if members != len(links) {
		return false // someone else's link shares the group: be exact
	}
	req := nl.NewNetlinkRequest(unix.RTM_DELLINK, unix.NLM_F_ACK)
	req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
	req.AddData(nl.NewRtAttr(unix.IFLA_GROUP, nl.Uint32Attr(g)))
	_, err = req.Execute(unix.NETLINK_ROUTE, 0)
	return err == nil
}

func (netlinkDataplane) BridgeStatus(name string) error { return bridge.Status(name) }

// guardTable is the node's anti-spoofing table named name. The node's
// link-local address on every vmlane bridge is the one the kernel derives
// from its fixed MAC (GatewayMAC), which a table written here protects
// from the start; vmlaned's sync adds whatever else the bridge has.
func guardTable(name string) antispoof.Table {
	mac, _ := net.ParseMAC(GatewayMAC)
	return antispoof.Table{Name: name, Routers6: []netip.Addr{antispoof.LinkLocalEUI64(mac)}}
}

func (netlinkDataplane) Guard(table string, p antispoof.Port, seen *antispoof.View) error {
	if seen != nil {
		return guardTable(table).AddSeen(p, *seen)
	}
	return guardTable(table).Add(p)
}
func (netlinkDataplane) Unguard(table string, ports ...string) error {
	return antispoof.Table{Name: table}.Remove(ports...)
}
func (netlinkDataplane) Guarded(table string) (antispoof.View, error) {
	return antispoof.Table{Name: table}.View()
}

func (netlinkDataplane) RouteHost(bridgeName string, dst netip.Prefix) error {
	return bridge.RouteHost(bridgeName, dst)
}

func (netlinkDataplane) UnrouteHost(bridgeName string, dst netip.Prefix) error {
	return bridge.UnrouteHost(bridgeName, dst)
}

// Unmap runs the portmap plugin's DEL for the attachment key, found in
// CNI_PATH as the runtime would. portmap's DEL does nothing unless it is
// given a mapping, and then removes every mapping of the network and
// container (its chains are named after them), so one placeholder mapping
// goes with it.
func (netlinkDataplane) Unmap(network, cniVersion string, key leases.Key) error {
	path, err := invoke.FindInPath("portmap", filepath.SplitList(os.Getenv("CNI_PATH")))
	if err != nil {
		return err
	}
	conf, err := json.Marshal(map[string]any{
		"cniVersion": cniVersion, "name": network, "type": "portmap", "snat": true,
		"runtimeConfig": map[string]any{"portMappings": []map[string]any{{"hostPort": 1, "containerPort": 1, "protocol": "tcp"}}},
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return invoke.ExecPluginWithoutResult(ctx, path, conf, &invoke.Args{
		Command: "DEL", ContainerID: key.ContainerID, IfName: key.IfName, Path: os.Getenv("CNI_PATH"),
	}, nil)
}

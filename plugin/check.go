package plugin

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/vmlane/vmlane/internal/antispoof"
	"github.com/vmlane/vmlane/leases"
)

// Check verifies an attachment against the result ADD returned.
func (p *Plugin) Check(args *skel.CmdArgs) error {
	return p.run("CHECK", args, func(c *Config, log *slog.Logger) error {
		if c.RawPrevResult == nil {
			return types.NewError(types.ErrInvalidNetworkConfig, "CHECK needs prevResult", "")
		}
		if err := version.ParsePrevResult(&c.PluginConf); err != nil {
			return types.NewError(types.ErrDecodingFailure, "parsing prevResult", err.Error())
		}
		prev, err := current.NewResultFromResult(c.PrevResult)
		if err != nil {
			return types.NewError(types.ErrDecodingFailure, "converting prevResult", err.Error())
		}
		want, err := expectedFromResult(prev, c, args)
		if err != nil {
			return err
		}
		store, err := c.store()
		if err != nil {
			return err
		}
		key := leases.Key{ContainerID: args.ContainerID, IfName: args.IfName}
		l, ok, err := store.Get(key)
		if err != nil {
			return storeError(err)
		}
		if !ok {
			return fmt.Errorf("no lease for attachment %s", key)
		}
		if err := compareLeaseAddrs(key, l, want.Addrs); err != nil {
			return err
		}
		if want.Tap != nil && l.MAC != want.Tap.MAC {
			return fmt.Errorf("lease of %s has MAC %s, the result says %s", key, l.MAC, want.Tap.MAC)
		}
		if c.Guard {
			if err := checkGuard(p.dp, AntiSpoofTable(c.Bridge), want.HostVeth.Name, l); err != nil {
				return err
			}
		}
		o, err := p.dp.Observe(args.Netns, want.Attached)
		if err != nil {
			return err
		}
		return compareAttachment(o, want)
	})
}

// compareLeaseAddrs checks that the attachment's lease holds the addresses
// the result names (IPv4, then IPv6 on a dual-stack network).
func compareLeaseAddrs(key leases.Key, l leases.Lease, addrs []netip.Prefix) error {
	if l.IP != addrs[0].Addr() {
		return fmt.Errorf("lease of %s holds %s, the result says %s", key, l.IP, addrs[0].Addr())
	}
	if len(addrs) > 1 && l.IP6 != addrs[1].Addr() {
		return fmt.Errorf("lease of %s holds IPv6 address %v, the result says %s", key, l.IP6, addrs[1].Addr())
	}
	return nil
}

// checkGuard reports a port whose anti-spoofing identity is not exactly
// its lease's.
func checkGuard(dp dataplane, table, port string, l leases.Lease) error {
	v, err := dp.Guarded(table)
	if err != nil {
		return fmt.Errorf("reading anti-spoofing ports: %w", err)
	}
	var got []string
	for _, p := range v.Ports {
		if p.Name == port {
			got = append(got, p.String())
		}
	}
	mac, _ := net.ParseMAC(l.MAC)
	if want := (antispoof.Port{Name: port, MAC: mac, IP: l.IP, IP6: l.IP6}).String(); len(got) != 1 || got[0] != want {
		return fmt.Errorf("anti-spoofing lets port %s send as %q, want exactly %q", port, got, want)
	}
	return nil
}

// expectedFromResult reads back what ADD reported.
func expectedFromResult(r *current.Result, c *Config, args *skel.CmdArgs) (Expected, error) {
	var want Expected
	bad := func(why string) (Expected, error) {
		return Expected{}, types.NewError(types.ErrInvalidNetworkConfig, "prevResult is not vmlane's: "+why, "")
	}
	n := 3
	if c.VM {
		n = 4
	}
	nIPs := 1
	if c.DualStack() {
		nIPs = 2
	}
	if len(r.Interfaces) != n || len(r.IPs) != nIPs {
		return bad(fmt.Sprintf("want %d interfaces and %d IPs, got %d and %d", n, nIPs, len(r.Interfaces), len(r.IPs)))
	}
	get := func(i int) Link {
		x := r.Interfaces[i]
		return Link{Name: x.Name, MAC: x.Mac, MTU: x.Mtu, Sandbox: x.Sandbox}
	}
	a := &want.Attached
	a.Bridge, a.HostVeth, a.PodVeth = get(ifBridge), get(ifHostVeth), get(ifPodVeth)
	if c.VM {
		t := get(ifTap)
		a.Tap = &t
	}
	if a.PodVeth.Name != args.IfName {
		return bad(fmt.Sprintf("pod interface is %q, CNI_IFNAME is %q", a.PodVeth.Name, args.IfName))
	}
	for i, rip := range r.IPs {
		ip, ok := netip.AddrFromSlice(rip.Address.IP)
		if !ok {
			return bad("no address")
		}
		ip = ip.Unmap()
		// IPv4 first, then IPv6, as ADD lists them.
		if ip.Is4() != (i == 0) {
			return bad(fmt.Sprintf("address %d is %s", i, ip))
		}
		ones, _ := rip.Address.Mask.Size()
		want.Addrs = append(want.Addrs, netip.PrefixFrom(ip, ones))
	}
	for _, rt := range r.Routes {
		dst, ok := netip.AddrFromSlice(rt.Dst.IP)
		if !ok {
			return bad(fmt.Sprintf("route to %s", rt.Dst.String()))
		}
		ones, _ := rt.Dst.Mask.Size()
		route := Route{Dst: netip.PrefixFrom(dst.Unmap(), ones)}
		if rt.GW != nil {
			if route.Via, ok = netip.AddrFromSlice(rt.GW); !ok {
				return bad(fmt.Sprintf("route to %s via %s", rt.Dst.String(), rt.GW))
			}
			route.Via = route.Via.Unmap()
		}
		want.Routes = append(want.Routes, route)
	}
	return want, nil
}

// Status reports whether the plugin can serve an ADD now (CNI 1.1): the
// bridge is up, the lease file is readable, and an address is free (of
// each family, on a dual-stack network).
func (p *Plugin) Status(args *skel.CmdArgs) error {
	return p.run("STATUS", args, func(c *Config, log *slog.Logger) error {
		if err := p.dp.BridgeStatus(c.Bridge); err != nil {
			return types.NewError(errPluginNotAvailable, fmt.Sprintf("bridge %s is not ready", c.Bridge), err.Error())
		}
		store, err := c.store()
		if err != nil {
			return types.NewError(errPluginNotAvailable, "lease store unusable", err.Error())
		}
		var free, free6 bool
		err = store.View(func(tx *leases.Tx) error {
			free = tx.Free(c.Exclude) > 0
			free6 = !c.DualStack() || tx.Free6() > 0
			return nil
		})
		if err != nil {
			return types.NewError(errPluginNotAvailable, "lease file unusable", err.Error())
		}
		if !free {
			return types.NewError(errPluginNotAvailable, fmt.Sprintf("subnet %s is full", c.SubnetPrefix), "")
		}
		if !free6 {
			// A dual-stack ADD needs an address of each family.
			return types.NewError(errPluginNotAvailable, fmt.Sprintf("subnet6 %s is full", c.Subnet6Prefix), "")
		}
		return nil
	})
}

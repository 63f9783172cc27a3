package routes

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/vmlane/vmlane/internal/netaddr"
)

// VXLANConfig is vmlane's VXLAN device.
type VXLANConfig struct {
	// Name is the device (DefaultVXLANDevice): vmlane owns a device of
	// that name, its FDB and its neighbour entries, and nothing else.
	Name      string
	VNI, Port int
	// Local is this node's underlay address; it picks the underlay's
	// family.
	Local netip.Addr
	// MTU is the device's: the uplink's minus VXLANOverhead(Local).
	MTU int
	// Bridge is vmlane's bridge: VXLAN that arrives from it (from a pod)
	// is dropped, whatever its source address.
	Bridge string
}

// vxlanTunnel is the Tunnel of a Linux node: a VXLAN device without
// learning, whose FDB and neighbour entries vmlane writes (one FDB entry
// per peer, its device MAC to its underlay address, and one permanent
// neighbour entry per next hop, the peer's address to that MAC), the way
// flannel's VXLAN backend does.
type vxlanTunnel struct {
	cfg    VXLANConfig
	h      *netlink.Handle
	filter *vxlanFilter
}

// NewVXLAN returns the tunnel of cfg, in the netns the calling thread is
// in now (its netlink socket stays there).
func NewVXLAN(cfg VXLANConfig) (Tunnel, error) {
	if cfg.Name == "" {
		cfg.Name = DefaultVXLANDevice
	}
	if !cfg.Local.IsValid() {
		return nil, errors.New("VXLAN: no underlay address for this node")
	}
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("VXLAN: netlink: %w", err)
	}
	// The filter's nftables connections open later, from whatever thread
	// reconciles: they go to this netns by a handle on it.
	ns, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("VXLAN: %w", err)
	}
	return &vxlanTunnel{cfg: cfg, h: h, filter: &vxlanFilter{netns: ns, port: uint16(cfg.Port), bridge: cfg.Bridge}}, nil
}

func (v *vxlanTunnel) Device() string    { return v.cfg.Name }
func (v *vxlanTunnel) Local() netip.Addr { return v.cfg.Local }

// Ensure makes the device, or makes an existing one right: one whose VNI,
// port, local address or learning differ is made again (the kernel does
// not change them in place), a wrong MTU or MAC is set, and it is set up.
func (v *vxlanTunnel) Ensure() error {
	mac := VTEPMAC(v.cfg.Local)
	l, err := v.h.LinkByName(v.cfg.Name)
	if err == nil {
		x, ok := l.(*netlink.Vxlan)
		if !ok || x.VxlanId != v.cfg.VNI || x.Port != v.cfg.Port || x.Learning ||
			!netaddr.FromIP(x.SrcAddr).IsValid() || netaddr.FromIP(x.SrcAddr) != v.cfg.Local {
			if err := v.h.LinkDel(l); err != nil {
				return fmt.Errorf("deleting %s to make it again: %w", v.cfg.Name, err)
			}
			l = nil
		}
	} else if !errors.As(err, new(netlink.LinkNotFoundError)) {
		return fmt.Errorf("looking up %s: %w", v.cfg.Name, err)
	} else {
		l = nil
	}
	if l == nil {
		x := &netlink.Vxlan{
			LinkAttrs: netlink.LinkAttrs{Name: v.cfg.Name, MTU: v.cfg.MTU, HardwareAddr: mac},
			VxlanId:   v.cfg.VNI,
			SrcAddr:   v.cfg.Local.AsSlice(),
			Port:      v.cfg.Port,
			Learning:  false,
		}
		if err := v.h.LinkAdd(x); err != nil {
			if errors.Is(err, syscall.EADDRINUSE) || errors.Is(err, syscall.EEXIST) {
				return fmt.Errorf("making VXLAN device %s (VNI %d, UDP port %d): %w: another VXLAN device or program holds the port with other settings, or has the VNI on it; pick others with --vxlan-port and --vxlan-vni",
					v.cfg.Name, v.cfg.VNI, v.cfg.Port, err)
			}
			return fmt.Errorf("making VXLAN device %s: %w", v.cfg.Name, err)
		}
		if l, err = v.h.LinkByName(v.cfg.Name); err != nil {
			return fmt.Errorf("looking up %s: %w", v.cfg.Name, err)
		}
	}
	a := l.Attrs()
	if a.MTU != v.cfg.MTU {
		if err := v.h.LinkSetMTU(l, v.cfg.MTU); err != nil {
			return fmt.Errorf("setting MTU %d on %s: %w", v.cfg.MTU, v.cfg.Name, err)
		}
	}
	if a.HardwareAddr.String() != mac.String() {
		if err := v.h.LinkSetHardwareAddr(l, mac); err != nil {
			return fmt.Errorf("setting MAC %s on %s: %w", mac, v.cfg.Name, err)
		}
	}
	if err := v.filter.ensure(); err != nil {
		return err
	}
	if a.Flags&net.FlagUp == 0 {
		if err := v.h.LinkSetUp(l); err != nil {
			return fmt.Errorf("setting %s up: %w", v.cfg.Name, err)
		}
	}
	return nil
}

// Sync writes the FDB and neighbour entries of peers and deletes every
// other permanent one of the device (vmlane's): a peer gone, or now
// on-link, leaves nothing behind. The filter accepts VXLAN from the
// peers' underlay addresses and sources.
func (v *vxlanTunnel) Sync(peers []TunnelPeer, sources []netip.Addr) error {
	from := slices.Clone(sources)
	for _, p := range peers {
		if !slices.Contains(from, p.Underlay) {
			from = append(from, p.Underlay)
		}
	}
	return errors.Join(v.syncEntries(peers), v.filter.sync(from))
}

func (v *vxlanTunnel) syncEntries(peers []TunnelPeer) error {
	l, err := v.h.LinkByName(v.cfg.Name)
	if err != nil {
		return fmt.Errorf("looking up %s: %w", v.cfg.Name, err)
	}
	idx := l.Attrs().Index
	fdb := map[string]netip.Addr{}   // MAC -> underlay
	neigh := map[netip.Addr]string{} // next hop -> MAC
	for _, p := range peers {
		fdb[p.MAC.String()] = p.Underlay
		for _, via := range p.Vias {
			neigh[via] = p.MAC.String()
		}
	}
	var errs []error
	// The FDB first: a neighbour entry leads to a MAC, the FDB to the
	// peer.
	have, err := v.h.NeighList(idx, unix.AF_BRIDGE)
	if err != nil {
		return fmt.Errorf("listing the FDB of %s: %w", v.cfg.Name, err)
	}
	for _, n := range have {
		if n.Flags&netlink.NTF_SELF == 0 {
			continue
		}
		if want, ok := fdb[n.HardwareAddr.String()]; ok && netaddr.FromIP(n.IP) == want {
			delete(fdb, n.HardwareAddr.String())
			continue
		}
		if err := v.h.NeighDel(&n); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("deleting FDB entry %s dst %s: %w", n.HardwareAddr, n.IP, err))
		}
	}
	for _, mac := range slices.Sorted(maps.Keys(fdb)) {
		hw, _ := net.ParseMAC(mac)
		e := &netlink.Neigh{LinkIndex: idx, Family: unix.AF_BRIDGE, State: netlink.NUD_PERMANENT, Flags: netlink.NTF_SELF,
			HardwareAddr: hw, IP: fdb[mac].AsSlice()}
		if err := v.h.NeighSet(e); err != nil {
			errs = append(errs, fmt.Errorf("adding FDB entry %s dst %s: %w", mac, fdb[mac], err))
		}
	}
	for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
		have, err := v.h.NeighList(idx, fam)
		if err != nil {
			errs = append(errs, fmt.Errorf("listing the neighbours of %s: %w", v.cfg.Name, err))
			continue
		}
		for _, n := range have {
			ip := netaddr.FromIP(n.IP)
			if n.State&netlink.NUD_PERMANENT == 0 {
				// The kernel's own (a solicitation that got nothing):
				// not vmlane's to keep or remove.
				continue
			}
			if want, ok := neigh[ip]; ok && n.HardwareAddr.String() == want {
				delete(neigh, ip)
				continue
			}
			if err := v.h.NeighDel(&n); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("deleting neighbour %s on %s: %w", ip, v.cfg.Name, err))
			}
		}
	}
	for _, via := range slices.SortedFunc(maps.Keys(neigh), netip.Addr.Compare) {
		hw, _ := net.ParseMAC(neigh[via])
		fam := unix.AF_INET
		if via.Is6() {
			fam = unix.AF_INET6
		}
		e := &netlink.Neigh{LinkIndex: idx, Family: fam, State: netlink.NUD_PERMANENT, IP: via.AsSlice(), HardwareAddr: hw}
		if err := v.h.NeighSet(e); err != nil {
			errs = append(errs, fmt.Errorf("adding neighbour %s lladdr %s on %s: %w", via, hw, v.cfg.Name, err))
		}
	}
	return errors.Join(errs...)
}

// RemoveVXLAN deletes vmlane's VXLAN device, if there is one, with the
// routes, FDB and neighbour entries on it, and its filter: a node that no
// longer runs --cross-subnet=vxlan keeps none of it.
func RemoveVXLAN(name string) (bool, error) {
	if name == "" {
		name = DefaultVXLANDevice
	}
	if err := removeVXLANFilter(); err != nil {
		return false, fmt.Errorf("VXLAN filter: %w", err)
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		if errors.As(err, new(netlink.LinkNotFoundError)) {
			return false, nil
		}
		return false, err
	}
	if _, ok := l.(*netlink.Vxlan); !ok {
		return false, fmt.Errorf("%s is a %s device, not vmlane's VXLAN device: leaving it", name, l.Type())
	}
	return true, netlink.LinkDel(l)
}

// ReplaceOnLink installs dst via via through dev whatever the kernel
// thinks of via's reachability (RTNH_F_ONLINK): the tunnel routes, whose
// next hop the device's neighbour entries resolve.
func (t netlinkTable) ReplaceOnLink(dst netip.Prefix, via netip.Addr, dev string, proto int) error {
	l, err := t.h.LinkByName(dev)
	if err != nil {
		return fmt.Errorf("looking up %s: %w", dev, err)
	}
	return t.h.RouteReplace(&netlink.Route{
		Dst:       netaddr.IPNet(dst),
		Gw:        via.AsSlice(),
		LinkIndex: l.Attrs().Index,
		Flags:     int(netlink.FLAG_ONLINK),
		Protocol:  netlink.RouteProtocol(proto),
		Table:     unix.RT_TABLE_MAIN,
	})
}

package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/vmlane/vmlane/internal/bridge"
	"github.com/vmlane/vmlane/internal/sysctl"
	"github.com/vmlane/vmlane/leases"
	"github.com/vmlane/vmlane/plugin"
	"github.com/vmlane/vmlane/routes"
)

// linuxNode is vmlaned on a Linux node: the bridge, the conflists, the
// DHCP server and anti-spoofing, and routes and iptables rules through
// netlink and iptables.
type linuxNode struct {
	c   *config
	log *slog.Logger
	// subnet is the node's IPv4 pod subnet, from setup.
	subnet netip.Prefix
}

// newPlatform takes the bridge's lock first, so a second vmlaned on this
// bridge says so, not that a port is taken.
func newPlatform(c *config, log *slog.Logger) (platform, func(), error) {
	lock, err := lockBridge(c.LeaseFile, c.Bridge)
	if err != nil {
		return nil, nil, err
	}
	return &linuxNode{c: c, log: log}, func() { lock.Close() }, nil
}

func (*linuxNode) ipv4Why() string { return "VM pods get their address by DHCPv4" }

func (l *linuxNode) setup(ctx context.Context, subnet netip.Prefix, reg prometheus.Registerer) (func(), error) {
	c := l.c
	if c.DHCPRangeText != "" && c.DHCPRange == nil {
		p, err := leases.ParsePool(c.DHCPRangeText, subnet)
		if err != nil {
			return nil, fmt.Errorf("invalid --dhcp-range for node podCIDR %s: %w", subnet, err)
		}
		c.DHCPRange = &p
	}
	l.subnet = subnet
	mtu, err := setupNode(c, subnet, l.log)
	if err != nil {
		return nil, err
	}
	flush, err := startDHCP(ctx, c, subnet, mtu, reg, l.log)
	if err != nil {
		return nil, err
	}
	go runAntiSpoof(ctx, c.Bridge, c.LeaseFile, c.AntiSpoofPeriod, newAntiSpoofMetrics(reg), l.log)
	return flush, nil
}

func (l *linuxNode) standalone(ctx context.Context, _ netip.Prefix, _ *health) {
	newConflistWatch(l.c).run(ctx, l.c.Resync, l.log, func(string) {})
}

func (l *linuxNode) controller(ctx context.Context, client kubernetes.Interface, recorder record.EventRecorder, reg prometheus.Registerer) (*routes.Controller, error) {
	c := l.c
	// On the Node, as the kubelet records its events (UID = the name).
	go newConflistWatch(c).run(ctx, c.Resync, l.log, func(msg string) {
		recorder.Event(&corev1.ObjectReference{Kind: "Node", Name: c.NodeName, UID: types.UID(c.NodeName), APIVersion: "v1"},
			corev1.EventTypeWarning, "CNIConfigShadowed", msg)
	})
	ipt4, err := routes.NewIPTables(false)
	if err != nil {
		// Most often an image without the iptables package.
		return nil, fmt.Errorf("iptables: %w (vmlaned runs the iptables command: the image needs Debian's iptables package, as manifests/image/packages lists)", err)
	}
	ipt6, err := routes.NewIPTables(true)
	if err != nil {
		l.log.Warn("ip6tables unusable; IPv6 pod traffic gets no vmlane rules", "err", err)
		ipt6 = nil
	}
	o := routeOptions(c)
	if o.Tunnel, err = newTunnel(c, l.log); err != nil {
		return nil, err
	}
	ctrl := routes.NewController(client, routes.NewKernelTable(), ipt4, ipt6, recorder, routes.NewMetrics(reg), l.log.With("component", "routes"), o)
	if dyn, err := dynamicClient(c.Kubeconfig); err != nil {
		l.log.Warn("no client for VMClaims: VMs keep their addresses on this node only", "err", err)
	} else {
		go runClaims(ctx, dyn, c, l.subnet, ctrl, newClaimsPassHistogram(reg), newPeerNoticesCounter(reg), l.log)
	}
	return ctrl, nil
}

func (l *linuxNode) up(ctx context.Context, client kubernetes.Interface, ctrl *routes.Controller, _ record.EventRecorder, _ netip.Prefix, h *health) {
	c, log := l.c, l.log
	if err := setNetworkCondition(ctx, client, c.NodeName, false, "VmlaneIsUp", "vmlane routes this node's pod subnet"); err != nil {
		log.Error("setting NetworkUnavailable=False", "err", err)
	}
	h.ready.Store(true)
	// A Node deleted and registered again comes back without the
	// condition (or with a cloud controller's True): set it again. The
	// informer's cache has it, so the check costs no request.
	t := time.NewTicker(c.Resync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n, err := ctrl.Node(c.NodeName); err == nil && !routes.NetworkAvailable(n) {
			log.Info("node lost its NetworkUnavailable=False condition; setting it again", "node", c.NodeName)
			if err := setNetworkCondition(ctx, client, c.NodeName, false, "VmlaneIsUp", "vmlane routes this node's pod subnet"); err != nil {
				log.Error("setting NetworkUnavailable=False", "err", err)
			}
		}
	}
}

// setupNode makes the bridge with the gateway and writes the conflists. It
// returns the MTU it chose.
func setupNode(c *config, subnet netip.Prefix, log *slog.Logger) (int, error) {
	gw := subnet.Addr().Next()
	mtu := c.MTU
	if mtu == 0 {
		mtu = uplinkMTU()
		if c.Underlay.IsValid() {
			// --cross-subnet=vxlan: every pod and VM fits the tunnel,
			// whichever peer it talks to. A pod's MTU cannot follow its
			// peers (a guest reads it once, from DHCP or the RA), and
			// which peers are behind the tunnel changes with the cluster;
			// flannel's DirectRouting makes the same choice.
			mtu -= routes.VXLANOverhead(c.Underlay)
		}
	}
	if _, err := bridge.Ensure(c.Bridge, netip.PrefixFrom(gw, subnet.Bits()), mtu, plugin.GatewayMAC); err != nil {
		return 0, fmt.Errorf("setting up bridge %s: %w", c.Bridge, err)
	}
	ensureForwarding(subnet, log)
	if err := sysctl.Ensure(sysctl.Proc{}, sysctl.BridgeProxy(c.Bridge)); err != nil {
		// The CNI plugin, which runs as root on the node, sets them at
		// its first ADD.
		log.Info("proxy ARP and NDP on the bridge are the CNI plugin's to set (/proc/sys is read-only here)", "err", err)
	}
	var gw6 netip.Addr
	if s6 := c.PodCIDR6; s6.IsValid() {
		gw6 = s6.Addr().Next()
		if err := bridge.EnsureAddr(c.Bridge, netip.PrefixFrom(gw6, s6.Bits())); err != nil {
			return 0, fmt.Errorf("putting IPv6 gateway %s on bridge %s: %w", gw6, c.Bridge, err)
		}
		ensureForwarding(s6, log)
	}
	for _, vm := range []bool{false, true} {
		p := conflistParams{Bridge: c.Bridge, Subnet: subnet, Gateway: gw, Subnet6: c.PodCIDR6, Gateway6: gw6, MTU: mtu, LeaseFile: c.LeaseFile,
			LeaseTime: c.LeaseTime, VMHoldTime: c.VMHoldTime, DNS: c.DNS, Search: c.Search, Domain: c.Domain, VM: vm, Exclude: c.DHCPRangeText, CNIVersion: c.CNIVersion, NoAntiSpoof: !c.AntiSpoof}
		data, err := renderConflist(p)
		if err != nil {
			return 0, err
		}
		name := conflistFile(vm)
		dir := c.CNIConfDir
		if vm {
			dir = c.VMCNIConfDir
		}
		wrote, err := writeConflist(dir, name, data)
		if err != nil {
			return 0, fmt.Errorf("writing CNI config: %w", err)
		}
		if wrote {
			log.Info("wrote CNI config", "file", filepath.Join(dir, name), "subnet", subnet)
		}
	}
	log.Info("node set up", "bridge", c.Bridge, "gateway", gw, "gateway6", gw6, "mtu", mtu)
	return mtu, nil
}

// uplinkMTU is the MTU of the default route's link (1500 without one).
func uplinkMTU() int {
	if mtu := bridge.DefaultRouteMTU(); mtu != 0 {
		return mtu
	}
	return 1500
}

// newTunnel returns the VXLAN tunnel of --cross-subnet=vxlan (its device is
// made by the route loop, which reports what stops it). In any other mode
// it removes a VXLAN device an earlier run left, with its routes: nothing
// of a mode no longer in use stays behind.
func newTunnel(c *config, log *slog.Logger) (routes.Tunnel, error) {
	if c.CrossSubnet != routes.CrossSubnetVXLAN {
		if had, err := routes.RemoveVXLAN(""); err != nil {
			log.Warn("removing the VXLAN device of an earlier run", "device", routes.DefaultVXLANDevice, "err", err)
		} else if had {
			log.Info("removed the VXLAN device of an earlier run", "device", routes.DefaultVXLANDevice, "crossSubnet", c.CrossSubnet)
		}
		return nil, nil
	}
	mtu := uplinkMTU() - routes.VXLANOverhead(c.Underlay)
	log.Info("cross-subnet mode vxlan", "device", routes.DefaultVXLANDevice, "vni", c.VXLANVNI, "port", c.VXLANPort, "underlay", c.Underlay, "mtu", mtu)
	return routes.NewVXLAN(routes.VXLANConfig{VNI: c.VXLANVNI, Port: c.VXLANPort, Local: c.Underlay, MTU: mtu, Bridge: c.Bridge})
}

// ensureForwarding turns on IP forwarding for subnet's family: pods reach
// other nodes and the outside world through this node, which routes them.
// kubeadm's preflight asks for the same setting; vmlane sets it rather than
// have every VM's traffic die at the bridge when a node image lacks it. It
// never turns forwarding off (other software on the node may rely on it).
//
// A container that is not privileged sees /proc/sys read-only (the
// DaemonSet's vmlaned is not privileged): there the setting is the node's
// to make, and vmlaned says so loudly and carries on, since pods on this
// node still reach each other and the node without it.
func ensureForwarding(subnet netip.Prefix, log *slog.Logger) {
	name := sysctl.LinuxIPv4Forwarding
	if subnet.Addr().Is6() {
		name = sysctl.LinuxIPv6Forwarding
	}
	changed, err := sysctl.EnsureForwarding(sysctl.Proc{}, name)
	if err != nil {
		log.Error("IP forwarding is off and vmlaned cannot turn it on: pods cannot reach other nodes or the outside; set it on the node",
			"sysctl", name, "err", err)
		return
	}
	if len(changed) > 0 {
		log.Info("enabled IP forwarding", "sysctl", name)
	}
}

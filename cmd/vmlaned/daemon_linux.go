package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vmlane/vmlane/internal/bridge"
	"github.com/vmlane/vmlane/internal/sysctl"
	"github.com/vmlane/vmlane/leases"
	"github.com/vmlane/vmlane/plugin"
	"github.com/vmlane/vmlane/routes"
)

func run(ctx context.Context, c *config, log *slog.Logger) error {
	// First, so a second vmlaned on this bridge says so, not that a port
	// is taken.
	lock, err := lockBridge(c.LeaseFile, c.Bridge)
	if err != nil {
		return err
	}
	defer lock.Close()
	reg, h, err := endpoints(ctx, c, log)
	if err != nil {
		return err
	}

	if c.PodCIDR.IsValid() {
		log.Info("standalone mode", "podCIDR", c.PodCIDR)
		mtu, err := setupNode(c, c.PodCIDR, log)
		if err != nil {
			return err
		}
		flush, err := startDHCP(ctx, c, c.PodCIDR, mtu, reg, log)
		if err != nil {
			return err
		}
		defer flush()
		go runAntiSpoof(ctx, c.LeaseFile, c.AntiSpoofPeriod, newAntiSpoofMetrics(reg), log)
		h.ready.Store(true)
		newConflistWatch(c).run(ctx, c.Resync, log, func(string) {})
		return nil
	}

	client, err := kubeClient(c.Kubeconfig)
	if err != nil {
		return err
	}
	v4, err := waitForIPv4PodCIDR(ctx, client, c.NodeName, log, "VM pods get their address by DHCPv4")
	if err != nil {
		return err
	}
	if c.DHCPRangeText != "" {
		p, err := leases.ParsePool(c.DHCPRangeText, v4)
		if err != nil {
			return fmt.Errorf("invalid --dhcp-range for node podCIDR %s: %w", v4, err)
		}
		c.DHCPRange = &p
	}
	mtu, err := setupNode(c, v4, log)
	if err != nil {
		return err
	}
	flush, err := startDHCP(ctx, c, v4, mtu, reg, log)
	if err != nil {
		return err
	}
	defer flush()
	go runAntiSpoof(ctx, c.LeaseFile, c.AntiSpoofPeriod, newAntiSpoofMetrics(reg), log)

	recorder, stopEvents := eventRecorder(ctx, client, c.NodeName)
	defer stopEvents()
	// On the Node, as the kubelet records its events (UID = the name).
	go newConflistWatch(c).run(ctx, c.Resync, log, func(msg string) {
		recorder.Event(&corev1.ObjectReference{Kind: "Node", Name: c.NodeName, UID: types.UID(c.NodeName), APIVersion: "v1"},
			corev1.EventTypeWarning, "CNIConfigShadowed", msg)
	})

	ipt4, err := routes.NewIPTables(false)
	if err != nil {
		// Most often an image without the iptables package.
		return fmt.Errorf("iptables: %w (vmlaned runs the iptables command: the image needs Debian's iptables package, as manifests/image/packages lists)", err)
	}
	ipt6, err := routes.NewIPTables(true)
	if err != nil {
		log.Warn("ip6tables unusable; IPv6 pod traffic gets no vmlane rules", "err", err)
		ipt6 = nil
	}
	ctrl := routes.NewController(client, routes.NewKernelTable(), ipt4, ipt6, recorder, routes.NewMetrics(reg), log.With("component", "routes"), routeOptions(c))
	h.lastOK = ctrl.LastSuccess
	if err := routes.WatchDeletes(c.RouteProtocol, ctx.Done(), ctrl.Trigger); err != nil {
		log.Warn("no route-delete events; lost routes come back at the next resync", "err", err)
	}
	go func() {
		// Ready once the routes of the cluster are known: the node is set
		// up and the informer has synced.
		select {
		case <-ctx.Done():
			return
		case <-ctrl.Ready():
		}
		if err := setNetworkCondition(ctx, client, c.NodeName, false, "VmlaneIsUp", "vmlane routes this node's pod subnet"); err != nil {
			log.Error("setting NetworkUnavailable=False", "err", err)
		}
		h.ready.Store(true)
		// A Node deleted and registered again comes back without the
		// condition (or with a cloud controller's True): set it again.
		// The informer's cache has it, so the check costs no request.
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
	}()
	return ctrl.Run(ctx)
}

// setupNode makes the bridge with the gateway and writes the conflists. It
// returns the MTU it chose.
func setupNode(c *config, subnet netip.Prefix, log *slog.Logger) (int, error) {
	gw := subnet.Addr().Next()
	mtu := c.MTU
	if mtu == 0 {
		mtu = bridge.DefaultRouteMTU()
	}
	if mtu == 0 {
		mtu = 1500
	}
	if _, err := bridge.Ensure(c.Bridge, netip.PrefixFrom(gw, subnet.Bits()), mtu, plugin.DeriveMAC(gw)); err != nil {
		return 0, fmt.Errorf("setting up bridge %s: %w", c.Bridge, err)
	}
	ensureForwarding(subnet, log)
	for _, vm := range []bool{false, true} {
		p := conflistParams{Bridge: c.Bridge, Subnet: subnet, Gateway: gw, MTU: mtu, LeaseFile: c.LeaseFile,
			LeaseTime: c.LeaseTime, DNS: c.DNS, Search: c.Search, Domain: c.Domain, VM: vm, Exclude: c.DHCPRangeText, CNIVersion: c.CNIVersion, NoAntiSpoof: !c.AntiSpoof}
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
	log.Info("node set up", "bridge", c.Bridge, "gateway", gw, "mtu", mtu)
	return mtu, nil
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

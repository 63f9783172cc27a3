package main

// vmlaned on a macOS node. There is no bridge, CNI conflist or DHCP server
// of vmlane's here: Virtualization.framework VMs sit behind vmnet's shared
// network, and vmnet's own DHCP server (bootpd) hands out their addresses.
// vmlaned makes that network the node's podCIDR (vmnet's plist up to
// macOS 15, a network description for the vmnet_network API from macOS
// 26), routes the other nodes' pod subnets (package routes on the BSD
// table), exempts pod-to-pod traffic from vmnet's NAT with a pf anchor,
// and watches vmnet's bridge: when vmnet put the shared network on
// another subnet, the node says so (an Event, a metric, and the
// NetworkUnavailable condition) rather than have other nodes route a
// subnet its VMs are not on.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/vmlane/vmlane/internal/command"
	"github.com/vmlane/vmlane/internal/sysctl"
	"github.com/vmlane/vmlane/pf"
	"github.com/vmlane/vmlane/routes"
)

// darwinNode is vmlaned on a macOS node: vmnet's configuration, routes in
// the BSD table and the pf anchor.
type darwinNode struct {
	c   *config
	log *slog.Logger
	v   *vmnet
	// hook is what the route controller's full passes found of pf's
	// main ruleset (nil until the controller is made).
	hook *hookStatus
}

func newPlatform(c *config, log *slog.Logger) (platform, func(), error) {
	version, err := pf.ProductVersion()
	if err != nil {
		return nil, nil, err
	}
	mode, err := pf.ModeFor(version)
	if err != nil {
		return nil, nil, err
	}
	v := &vmnet{c: c, mode: mode, log: log.With("component", "vmnet")}
	log.Info("macOS node", "version", version, "vmnet", mode, "path", v.path())
	if c.DHCPRangeText != "" {
		log.Warn("--dhcp-range is ignored on macOS: vmnet's own DHCP server serves the VMs")
	}
	return &darwinNode{c: c, log: log, v: v}, func() {}, nil
}

func (*darwinNode) ipv4Why() string { return "vmnet's shared network is IPv4" }

func (d *darwinNode) setup(_ context.Context, subnet netip.Prefix, reg prometheus.Registerer) (func(), error) {
	if d.v.m == nil {
		d.v.m = newVmnetMetrics(reg)
	}
	if d.c.PodCIDR6.IsValid() && d.v.mode != pf.ModeNetworkAPI {
		d.log.Info("the node's IPv6 podCIDR is not served: vmnet's shared network is IPv4 only before macOS 26", "podCIDR6", d.c.PodCIDR6)
	}
	return func() {}, d.v.configure(subnet)
}

func (d *darwinNode) standalone(ctx context.Context, subnet netip.Prefix, h *health) {
	d.v.h = h
	d.v.watch(ctx, subnet, nil)
}

func (d *darwinNode) controller(_ context.Context, client kubernetes.Interface, recorder record.EventRecorder, reg prometheus.Registerer) (*routes.Controller, error) {
	c := d.c
	table, err := routes.NewBSDTable(routes.DefaultBSDStatePath, c.RouteProtocol)
	if err != nil {
		d.log.Warn("route state unreadable; routes vmlaned added before are left in place", "err", err)
	}
	p, err := pf.New(c.PFAnchor, command.Exec{}, pf.DefaultStatePath)
	if err != nil {
		return nil, err
	}
	if fresh, err := p.Enable(); errors.Is(err, pf.ErrAgesNotUnderstood) {
		d.log.Warn("pf enabled, but its reference list reads otherwise than expected", "token", p.Token(), "err", err)
	} else if err != nil {
		return nil, fmt.Errorf("enabling pf: %w", err)
	} else if fresh {
		d.log.Info("pf enabled with a reference of vmlane's", "token", p.Token())
	}
	d.hook = newHookStatus(reg)
	nat := pfBackend{pf: p, sysctl: sysctl.Command{Run: command.Exec{}}, hook: d.hook}
	return routes.NewAnchorController(client, table, nat, recorder, routes.NewMetrics(reg), d.log.With("component", "routes"), routeOptions(c)), nil
}

// up watches vmnet's bridge against the podCIDR, and what the route
// controller found of pf's main ruleset, for as long as ctx lasts: the
// Node's NetworkUnavailable condition, an Event and readiness follow
// what they find. Either problem makes the node's network unavailable.
func (d *darwinNode) up(ctx context.Context, client kubernetes.Interface, ctrl *routes.Controller, recorder record.EventRecorder, subnet netip.Prefix, h *health) {
	c, log := d.c, d.log
	d.v.h = h
	lastHook := ""
	d.v.watch(ctx, subnet, func(st pf.BridgeStatus, msg string, changed bool) {
		n, err := ctrl.Node(c.NodeName)
		hook := d.hook.get()
		if hook != lastHook {
			changed = true
			if hook != "" {
				log.Warn(hook)
				if err == nil {
					ref := &corev1.ObjectReference{Kind: "Node", Name: n.Name, UID: n.UID, APIVersion: "v1"}
					recorder.Event(ref, corev1.EventTypeWarning, "PfHookMissing", hook)
				}
			} else {
				log.Info("pf's main ruleset reaches vmlane's anchor again")
			}
			lastHook = hook
		}
		mismatch := st.State == pf.BridgeMismatch
		notServed := st.State == pf.BridgeNotServed
		if !changed {
			// A Node deleted and registered again comes back without
			// the condition: set it again (as on Linux; the informer's
			// cache has it, so the check costs no request).
			if err != nil || mismatch || notServed || hook != "" || routes.NetworkAvailable(n) {
				return
			}
			log.Info("node lost its NetworkUnavailable=False condition; setting it again", "node", c.NodeName)
		}
		if changed && err == nil && (mismatch || notServed) {
			ref := &corev1.ObjectReference{Kind: "Node", Name: n.Name, UID: n.UID, APIVersion: "v1"}
			reason := "VmnetSubnetMismatch"
			if notServed {
				reason = "VmnetNotServed"
			}
			recorder.Event(ref, corev1.EventTypeWarning, reason, msg)
		}
		// A mismatch makes the node's network unavailable (the node
		// lifecycle controller taints it): pods scheduled here would
		// get addresses no other node routes to.
		// So does a macOS 26 node whose vmlane-vmnet holds no network:
		// no VM can join the pod network there.
		reason, condMsg := "VmlaneIsUp", "vmlane routes this node's pod subnet"
		switch {
		case mismatch:
			reason, condMsg = "VmnetSubnetMismatch", msg
		case notServed:
			reason, condMsg = "VmnetNotServed", msg
		case hook != "":
			reason, condMsg = "PfHookMissing", hook
		}
		unavailable := mismatch || notServed || hook != ""
		if err := setNetworkCondition(ctx, client, c.NodeName, unavailable, reason, condMsg); err != nil {
			log.Error("setting the NetworkUnavailable condition", "err", err)
		}
		h.ready.Store(!unavailable)
	})
}

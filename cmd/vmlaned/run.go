//go:build linux || darwin

package main

import (
	"context"
	"log/slog"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/vmlane/vmlane/routes"
)

// platform is what a Linux node and a macOS node do differently; run is
// the shape they share.
type platform interface {
	// ipv4Why says what needs an IPv4 podCIDR on this system.
	ipv4Why() string
	// setup configures the node for its IPv4 pod subnet, and on Linux its
	// IPv6 one (config.PodCIDR6) too (Linux: bridge, conflists, the DHCP
	// and DHCPv6 servers, router advertisements, anti-spoofing; macOS:
	// vmnet, IPv4 only) and returns what to run when vmlaned stops.
	setup(ctx context.Context, subnet netip.Prefix, reg prometheus.Registerer) (stop func(), err error)
	// standalone keeps a node without Kubernetes in shape until ctx ends.
	// h gets what the node finds for /healthz.
	standalone(ctx context.Context, subnet netip.Prefix, h *health)
	// controller makes the route controller, and starts what else runs
	// beside it and reports through recorder.
	controller(ctx context.Context, client kubernetes.Interface, recorder record.EventRecorder, reg prometheus.Registerer) (*routes.Controller, error)
	// up runs once the controller's first reconcile is done: it sets the
	// Node's NetworkUnavailable condition and turns h ready, and keeps
	// them true until ctx ends.
	up(ctx context.Context, client kubernetes.Interface, ctrl *routes.Controller, recorder record.EventRecorder, subnet netip.Prefix, h *health)
}

// run is vmlaned: endpoints, then either a standalone node (--pod-cidr)
// or one that waits for its Node's podCIDR, sets itself up for it, routes
// the other nodes' pod subnets and reports itself up once routes are in;
// or, with --routes-only, the route controller alone (runRoutesOnly).
func run(ctx context.Context, c *config, log *slog.Logger) error {
	if c.RoutesOnly {
		return runRoutesOnly(ctx, c, log)
	}
	p, closeP, err := newPlatform(c, log)
	if err != nil {
		return err
	}
	defer closeP()
	reg, h, err := endpoints(ctx, c, log)
	if err != nil {
		return err
	}

	if c.PodCIDR.IsValid() {
		log.Info("standalone mode", "podCIDR", c.PodCIDR)
		stop, err := p.setup(ctx, c.PodCIDR, reg)
		if err != nil {
			return err
		}
		defer stop()
		h.ready.Store(true)
		p.standalone(ctx, c.PodCIDR, h)
		return nil
	}

	client, err := kubeClient(c.Kubeconfig)
	if err != nil {
		return err
	}
	v4, v6, err := waitForNodePodCIDRs(ctx, client, c.NodeName, log, p.ipv4Why())
	if err != nil {
		return err
	}
	c.PodCIDR6 = v6
	if c.CrossSubnet == routes.CrossSubnetVXLAN {
		// Before setup: the pod MTU leaves room for the tunnel's headers.
		if c.Underlay, err = underlayAddr(ctx, client, c); err != nil {
			return err
		}
	}
	stop, err := p.setup(ctx, v4, reg)
	if err != nil {
		return err
	}
	defer stop()
	recorder, stopEvents := eventRecorder(ctx, client, c.NodeName)
	defer stopEvents()
	if c.CrossSubnet == routes.CrossSubnetBGP {
		sp, err := startBGP(ctx, client, c, recorder, reg, log)
		if err != nil {
			return err
		}
		// Stopped without a withdrawal: peers keep the routes for the
		// restart time, and the next vmlaned takes them over.
		defer sp.Stop()
		c.Announcer = sp
	}
	ctrl, err := p.controller(ctx, client, recorder, reg)
	if err != nil {
		return err
	}
	h.lastOK = ctrl.LastSuccess
	watchRouteDeletes(ctx, c, ctrl, log)
	go func() {
		select {
		case <-ctx.Done():
			return
		case <-ctrl.Ready():
		}
		p.up(ctx, client, ctrl, recorder, v4, h)
	}()
	return ctrl.Run(ctx)
}

// watchRouteDeletes has ctrl reconcile when the kernel loses one of its
// routes; without the events, lost routes come back at the next resync.
func watchRouteDeletes(ctx context.Context, c *config, ctrl *routes.Controller, log *slog.Logger) {
	if err := routes.WatchDeletes(c.RouteProtocol, ctx.Done(), ctrl.Trigger); err != nil {
		log.Warn("no route-delete events; lost routes come back at the next resync", "err", err)
	}
}

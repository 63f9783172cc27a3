package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"k8s.io/client-go/tools/record"

	"github.com/vmlane/vmlane/routes"
)

// runRoutesOnly is vmlaned --routes-only, on a node whose pods another
// CNI (flannel, Cilium, Calico) serves: the route controller alone, routing
// the pod subnets of the VM nodes via their addresses so that this node's
// pods reach VMs by pod IP, and, with --service-cidr, masquerading the VM
// nodes' traffic to Services so that a node without kube-proxy can use this
// one as its Service gateway. It makes no bridge, writes no conflist,
// serves no DHCP, keeps no lease file and no anti-spoofing table, and
// leaves the node's NetworkUnavailable condition to the node's CNI. Routes
// carry vmlane's protocol and iptables rules sit in vmlane's own chains, so
// nothing of the other CNI's is changed.
//
// Without a node name it runs on a host that is not a node: a control
// plane (kube-apiserver, which proxies to pods and calls webhooks and
// aggregated APIs served by pods) that kubeadm did not make a node, or a
// managed one's bastion. There it routes every node's pod subnets, whatever
// the node's CNI: a node forwards what arrives for its own pod subnet.
func runRoutesOnly(ctx context.Context, c *config, log *slog.Logger) error {
	if len(c.Ignored) > 0 {
		log.Warn("routes-only mode ignores these flags, which only full mode uses", "flags", strings.Join(c.Ignored, " "))
	}
	reg, h, err := endpoints(ctx, c, log)
	if err != nil {
		return err
	}
	client, err := kubeClient(c.Kubeconfig)
	if err != nil {
		return err
	}
	// Events go on the node's own Node; a host that is not a node has
	// none, and its log says all of it.
	var recorder record.EventRecorder = &record.FakeRecorder{}
	if c.NodeName != "" {
		rec, stopEvents := eventRecorder(ctx, client, c.NodeName)
		defer stopEvents()
		recorder = rec
	}
	// iptables only for the Service gateway's masquerade, and only for
	// the families it has a Service CIDR of.
	var ipt4, ipt6 routes.IPTables
	for _, p := range c.ServiceCIDRs {
		ipt, err := routes.NewIPTables(p.Addr().Is6())
		if err != nil {
			return fmt.Errorf("iptables for the Service gateway of %s: %w", p, err)
		}
		if p.Addr().Is4() {
			ipt4 = ipt
		} else {
			ipt6 = ipt
		}
	}
	o := routeOptions(c)
	if c.CrossSubnet == routes.CrossSubnetVXLAN {
		if c.Underlay, err = underlayAddr(ctx, client, c); err != nil {
			return err
		}
	}
	if o.Tunnel, err = newTunnel(c, log); err != nil {
		return err
	}
	ctrl := routes.NewController(client, routes.NewKernelTable(), ipt4, ipt6, recorder, routes.NewMetrics(reg), log.With("component", "routes"), o)
	h.lastOK = ctrl.LastSuccess
	watchRouteDeletes(ctx, c, ctrl, log)
	if dyn, err := dynamicClient(c.Kubeconfig); err != nil {
		log.Warn("no client for VMClaims: VMs that moved off their home node are not routed here", "err", err)
	} else {
		go runClaimRoutes(ctx, dyn, c, ctrl, newClaimsPassHistogram(reg), newPeerNoticesCounter(reg), log)
	}
	go func() {
		select {
		case <-ctx.Done():
		case <-ctrl.Ready():
			h.ready.Store(true)
		}
	}()
	if c.NodeName == "" {
		log.Info("routes-only mode on a host that is not a node: routing every node's pod subnets", "serviceGateway", c.ServiceCIDRs)
	} else {
		log.Info("routes-only mode: routing the pod subnets of VM nodes", "node", c.NodeName, "label", routes.VMNodeLabel+"=true", "serviceGateway", c.ServiceCIDRs)
	}
	return ctrl.Run(ctx)
}

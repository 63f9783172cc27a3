//go:build linux || darwin

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"

	"github.com/vmlane/vmlane/internal/version"
	"github.com/vmlane/vmlane/leases"
	"github.com/vmlane/vmlane/routes"
)

// kubeClient is a client from kubeconfig, or the in-cluster config (the
// DaemonSet's ServiceAccount) when kubeconfig is empty.
func kubeClient(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	// Protobuf, as the kubelet and kube-proxy use for core types: the
	// informer's list of every Node decodes several times faster than
	// JSON, which matters at thousands of nodes (the whole list is in the
	// path from start to the first route).
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	return kubernetes.NewForConfig(cfg)
}

// restConfig is the client config from kubeconfig, or the in-cluster one.
func restConfig(kubeconfig string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config (outside a pod, as on a Mac node, give --kubeconfig): %w", err)
	}
	cfg.UserAgent = "vmlaned/" + version.Version
	return cfg, nil
}

// dynamicClient is a client for vmlane's own resources (VMClaims), which
// custom resources serve as JSON only.
func dynamicClient(kubeconfig string) (dynamic.Interface, error) {
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	return dynamic.NewForConfig(cfg)
}

// waitForNodePodCIDRs waits for the node's podCIDRs and returns its IPv4
// one and, on a dual-stack node, its IPv6 one; podCIDRs vmlane cannot
// serve fail with why (what needs IPv4 on this system) or what is wrong.
func waitForNodePodCIDRs(ctx context.Context, client kubernetes.Interface, name string, log *slog.Logger, why string) (v4, v6 netip.Prefix, err error) {
	cidrs, err := waitForPodCIDRs(ctx, client, name, log)
	if err != nil {
		return v4, v6, err
	}
	v4, v6, err = splitPodCIDRs(cidrs)
	if err != nil {
		return v4, v6, fmt.Errorf("node %s podCIDRs %v: %w (%s)", name, cidrs, err, why)
	}
	return v4, v6, nil
}

// splitPodCIDRs checks a node's podCIDRs (spec.podCIDRs or --pod-cidr):
// exactly one IPv4 network of /30 or larger, and at most one IPv6 network
// of /64 to /120 (what the lease store allocates from). An IPv6-only node
// is an error: VM pods get their address by DHCPv4.
func splitPodCIDRs(cidrs []netip.Prefix) (v4, v6 netip.Prefix, err error) {
	for _, p := range cidrs {
		if p.Addr().Is4() {
			if v4.IsValid() {
				return v4, v6, fmt.Errorf("two IPv4 podCIDRs, %s and %s", v4, p)
			}
			if p.Bits() > 30 {
				return v4, v6, fmt.Errorf("IPv4 podCIDR %s is smaller than a /30, which has a gateway and one host", p)
			}
			v4 = p
			continue
		}
		if v6.IsValid() {
			return v4, v6, fmt.Errorf("two IPv6 podCIDRs, %s and %s", v6, p)
		}
		if err := leases.CheckSubnet6(p, p.Addr().Next()); err != nil {
			return v4, v6, fmt.Errorf("IPv6 podCIDR: %w", err)
		}
		v6 = p
	}
	if !v4.IsValid() {
		return v4, v6, errors.New("no IPv4 podCIDR: an IPv6-only node cannot serve VMs, which get their address by DHCPv4 (a dual-stack node has both)")
	}
	return v4, v6, nil
}

// waitForPodCIDRs polls the node until the node IPAM controller has given
// it podCIDRs, logging every 30 s. API errors (the server restarting) are
// retried with the same patience.
func waitForPodCIDRs(ctx context.Context, client kubernetes.Interface, name string, log *slog.Logger) ([]netip.Prefix, error) {
	var lastLog time.Time
	for {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			rn := routes.FromNode(n, "")
			if len(rn.PodCIDRs) > 0 {
				return rn.PodCIDRs, nil
			}
		}
		if time.Since(lastLog) >= 30*time.Second {
			if err != nil {
				log.Info("waiting for the API server", "node", name, "err", err)
			} else {
				log.Info("waiting for the node's podCIDRs", "node", name)
			}
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// setNetworkCondition sets the Node's NetworkUnavailable condition: False
// once vmlane routes the node's pod subnet, as every network plugin that
// routes pod subnets does, so the node.kubernetes.io/network-unavailable
// taint goes away; True on a Mac while vmnet's network is not the podCIDR.
func setNetworkCondition(ctx context.Context, client kubernetes.Interface, name string, unavailable bool, reason, msg string) error {
	status := corev1.ConditionFalse
	if unavailable {
		status = corev1.ConditionTrue
	}
	now := metav1.Now()
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
		Type:               corev1.NodeNetworkUnavailable,
		Status:             status,
		Reason:             reason,
		Message:            strings.TrimSpace(msg),
		LastTransitionTime: now,
		LastHeartbeatTime:  now,
	}}}})
	// A strategic merge patch: conditions merge by type, so the kubelet's
	// own conditions stay.
	_, err := client.CoreV1().Nodes().PatchStatus(ctx, name, patch)
	return err
}

// endpoints starts /healthz, /readyz and /metrics for a daemon and returns
// the metrics registry (with the Go and process collectors) and the health
// state the daemon updates.
func endpoints(ctx context.Context, c *config, log *slog.Logger) (*prometheus.Registry, *health, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo())
	h := &health{start: time.Now(), window: 3 * c.Resync}
	if err := serve(ctx, c.HealthAddr, h.mux(), log); err != nil {
		return nil, nil, err
	}
	if err := serve(ctx, c.MetricsAddr, metricsHandler(reg), log); err != nil {
		return nil, nil, err
	}
	return reg, h, nil
}

// eventRecorder records Events as vmlaned on node; stop flushes and ends
// the broadcaster.
func eventRecorder(ctx context.Context, client kubernetes.Interface, node string) (rec record.EventRecorder, stop func()) {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "vmlaned", Host: node}), b.Shutdown
}

// routeOptions are the route controller's options from the flags.
func routeOptions(c *config) routes.Options {
	return routes.Options{
		NodeName:         c.NodeName,
		NodeIPAnnotation: c.NodeIPAnnotation,
		ClusterCIDRs:     c.ClusterCIDRs,
		Masquerade:       c.Masquerade,
		Protocol:         c.RouteProtocol,
		Resync:           c.Resync,
		VMNodesOnly:      c.RoutesOnly && c.NodeName != "",
		Services:         c.ServiceCIDRs,
		RouteServices:    c.RouteServices,
		CrossSubnet:      c.CrossSubnet,
		Announcer:        c.Announcer,
	}
}

// underlayAddr is this node's address that peers send VXLAN packets to:
// its first next-hop address (the --node-ip-annotation one, then its
// InternalIPs), which also picks the underlay's family.
func underlayAddr(ctx context.Context, client kubernetes.Interface, c *config) (netip.Addr, error) {
	n, err := client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
	if err != nil {
		return netip.Addr{}, fmt.Errorf("reading node %s for its VXLAN underlay address: %w", c.NodeName, err)
	}
	rn := routes.FromNode(n, c.NodeIPAnnotation)
	if len(rn.Addrs) == 0 {
		return netip.Addr{}, fmt.Errorf("node %s has no InternalIP (nor %s annotation) for the VXLAN underlay", c.NodeName, c.NodeIPAnnotation)
	}
	return rn.Addrs[0], nil
}

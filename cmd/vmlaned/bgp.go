//go:build linux || darwin

package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/vmlane/vmlane/routes"
	"github.com/vmlane/vmlane/routes/bgp"
)

// bgpConfig is the speaker's configuration for node n: the flags, with
// the Node's own bgp.AnnotationASN and bgp.AnnotationPeers over them, the
// router ID (--bgp-router-id, else the node's first IPv4 address) and the
// next hops (the node's first address of each family: the
// --node-ip-annotation one, then its InternalIPs).
func bgpConfig(c *config, n *corev1.Node) (bgp.Config, error) {
	cfg := bgp.Config{ASN: c.BGPASN, Peers: c.BGPPeers, RouterID: c.BGPRouterID, MaxPrefixes: c.BGPMaxPrefixes}
	if v, ok := n.Annotations[bgp.AnnotationASN]; ok {
		asn, err := bgp.ParseASN(v)
		if err != nil {
			return cfg, fmt.Errorf("node %s annotation %s=%q: %w", n.Name, bgp.AnnotationASN, v, err)
		}
		cfg.ASN = asn
	}
	if v, ok := n.Annotations[bgp.AnnotationPeers]; ok {
		peers, err := bgp.ParsePeers(v)
		if err != nil {
			return cfg, fmt.Errorf("node %s annotation %s=%q: %w", n.Name, bgp.AnnotationPeers, v, err)
		}
		cfg.Peers = peers
	}
	for _, a := range routes.FromNode(n, c.NodeIPAnnotation).Addrs {
		if a.Is4() && !cfg.NextHop4.IsValid() {
			cfg.NextHop4 = a
		}
		if a.Is6() && !cfg.NextHop6.IsValid() {
			cfg.NextHop6 = a
		}
	}
	if !cfg.RouterID.IsValid() {
		cfg.RouterID = cfg.NextHop4
	}
	if c.BGPPasswordFile != "" {
		b, err := os.ReadFile(c.BGPPasswordFile)
		if err != nil {
			return cfg, fmt.Errorf("--bgp-password-file: %w", err)
		}
		cfg.Password = strings.TrimRight(string(b), "\r\n")
		if cfg.Password == "" {
			return cfg, fmt.Errorf("--bgp-password-file %s is empty", c.BGPPasswordFile)
		}
	}
	if err := cfg.Check(); err != nil {
		return cfg, fmt.Errorf("node %s: %w", n.Name, err)
	}
	return cfg, nil
}

// startBGP starts the speaker of --cross-subnet=bgp for this node; the
// route controller tells it what to announce. Its Events go on the Node.
func startBGP(ctx context.Context, client kubernetes.Interface, c *config, recorder record.EventRecorder, reg prometheus.Registerer, log *slog.Logger) (*bgp.Speaker, error) {
	n, err := client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading node %s for its BGP configuration: %w", c.NodeName, err)
	}
	cfg, err := bgpConfig(c, n)
	if err != nil {
		return nil, fmt.Errorf("--cross-subnet=bgp: %w", err)
	}
	ref := &corev1.ObjectReference{Kind: "Node", Name: c.NodeName, UID: types.UID(c.NodeName), APIVersion: "v1"}
	return bgp.Start(ctx, cfg, bgp.NewMetrics(reg), log.With("component", "bgp"), func(reason, msg string) {
		recorder.Event(ref, corev1.EventTypeWarning, reason, msg)
	})
}

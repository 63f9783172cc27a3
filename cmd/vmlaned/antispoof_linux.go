package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmlane/vmlane/internal/antispoof"
	"github.com/vmlane/vmlane/internal/bridge"
	"github.com/vmlane/vmlane/leases"
	"github.com/vmlane/vmlane/plugin"
)

// antiSpoofMetrics count what the anti-spoofing loop did.
type antiSpoofMetrics struct {
	repairs, syncErrors prometheus.Counter
	ports               prometheus.Gauge
}

func newAntiSpoofMetrics(reg prometheus.Registerer) *antiSpoofMetrics {
	m := &antiSpoofMetrics{
		repairs:    prometheus.NewCounter(prometheus.CounterOpts{Name: "vmlane_antispoof_repairs_total", Help: "Times the anti-spoofing table was found changed or missing and written again."}),
		syncErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "vmlane_antispoof_sync_errors_total", Help: "Anti-spoofing syncs that failed."}),
		ports:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "vmlane_antispoof_ports", Help: "Bridge ports anti-spoofing checks."}),
	}
	reg.MustRegister(m.repairs, m.syncErrors, m.ports)
	return m
}

// guardedPorts is what the lease file says the anti-spoofing table must
// hold: each lease that names its bridge port, whatever its state or
// source (one a newer vmlane wrote too: its port stays checked). A lease
// whose MAC does not parse is left out (and logged), never the whole sync.
func guardedPorts(ls []leases.Lease, log *slog.Logger) []antispoof.Port {
	var ports []antispoof.Port
	for _, l := range ls {
		if l.BridgePort == "" {
			continue
		}
		mac, err := net.ParseMAC(l.MAC)
		p := antispoof.Port{Name: l.BridgePort, MAC: mac, IP: l.IP, IP6: l.IP6}
		if err == nil {
			err = p.Validate()
		}
		if err != nil {
			log.Warn("lease names a bridge port it cannot be checked on", "ip", l.IP, "port", l.BridgePort, "err", err)
			continue
		}
		ports = append(ports, p)
	}
	return ports
}

// syncAntiSpoof makes the table hold exactly the ports the lease file
// names, and repairs it if someone changed it. With no port to check and
// no table, it does nothing: a node whose pods all have anti-spoofing off
// (or a kernel without nftables) never gets a table.
func syncAntiSpoof(tb antispoof.Table, leaseFile string, m *antiSpoofMetrics, log *slog.Logger) error {
	// The table first, then the leases: a port the plugin adds in
	// between has its lease written before it, but not in this read, and
	// Sync keeps what this listing lacks.
	listed, err := tb.Ports()
	if err != nil {
		return err
	}
	snap, err := leases.Read(leaseFile)
	var ls []leases.Lease
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	default:
		ls = snap.Leases()
	}
	want := guardedPorts(ls, log)
	if len(want) == 0 && len(listed) == 0 {
		m.ports.Set(0)
		return nil
	}
	ch, err := tb.Sync(want, listed)
	if err != nil {
		return err
	}
	m.ports.Set(float64(len(want)))
	if ch.Repaired != "" {
		m.repairs.Inc()
		log.Warn("anti-spoofing table was changed or removed; written again", "found", ch.Repaired)
	}
	for _, p := range ch.Added {
		log.Info("anti-spoofing port added", "port", p.Name, "mac", p.MAC.String(), "ip", p.IP, "ip6", p.IP6)
	}
	for _, p := range ch.Removed {
		log.Info("anti-spoofing port removed", "port", p.Name, "mac", p.MAC.String(), "ip", p.IP, "ip6", p.IP6)
	}
	for _, name := range ch.Attached {
		log.Info("anti-spoofing ingress check attached", "port", name)
	}
	for _, name := range ch.Detached {
		log.Info("anti-spoofing ingress check removed", "port", name)
	}
	return nil
}

// bridgeRouters6 are the node's IPv6 link-local addresses on the bridge,
// which the anti-spoofing table keeps pods from sending as or advertising:
// the one the kernel derives from the bridge's MAC (the bridge gets it only
// once a port is up) and any the bridge has. nil when the bridge cannot be
// read, which leaves the table's as they are.
func bridgeRouters6(name string) []netip.Addr {
	l, err := netlinksafe.LinkByName(name)
	if err != nil {
		return nil
	}
	out := []netip.Addr{antispoof.LinkLocalEUI64(l.Attrs().HardwareAddr)}
	addrs, err := netlinksafe.AddrList(l, netlink.FAMILY_V6)
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.IsLinkLocalUnicast() && ip != out[0] {
			out = append(out, ip)
		}
	}
	return out
}

// keepNoLinkLocalLearn puts the bridge's no_linklocal_learn back if someone
// turned it off (see bridge.EnsureNoLinkLocalLearn), counting it as a
// repair.
func keepNoLinkLocalLearn(name string, m *antiSpoofMetrics, log *slog.Logger) error {
	changed, err := bridge.EnsureNoLinkLocalLearn(name)
	if err != nil {
		return err
	}
	if changed {
		m.repairs.Inc()
		log.Warn("the bridge learnt source MACs from link-local frames (no_linklocal_learn was off); turned it on again", "bridge", name)
	}
	return nil
}

// runAntiSpoof syncs at once and then every period until ctx ends. A
// failure is logged once until a sync succeeds again.
func runAntiSpoof(ctx context.Context, bridgeName, leaseFile string, period time.Duration, m *antiSpoofMetrics, log *slog.Logger) {
	log = log.With("component", "antispoof")
	t := time.NewTicker(period)
	defer t.Stop()
	failing := false
	for {
		tb := antispoof.Table{Name: plugin.AntiSpoofTable(bridgeName), Routers6: bridgeRouters6(bridgeName)}
		err := errors.Join(syncAntiSpoof(tb, leaseFile, m, log), keepNoLinkLocalLearn(bridgeName, m, log))
		switch {
		case err != nil:
			m.syncErrors.Inc()
			if !failing {
				log.Error("anti-spoofing sync failed; retrying every period", "period", period, "err", err)
			}
			failing = true
		case failing:
			log.Info("anti-spoofing sync works again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// backfillBridgePorts names the bridge port of the CNI leases a plugin
// from before anti-spoofing wrote, where that port (the attachment's host
// veth) is on the bridge, so that the next sync checks it: pods that run
// through the upgrade are protected without being attached again. vmlaned
// does it only with --anti-spoof, when the conflists it writes have it on.
func backfillBridgePorts(store *leases.Store, bridgeName string, log *slog.Logger) error {
	ports, err := bridge.Ports(bridgeName)
	if err != nil {
		return fmt.Errorf("listing the ports of bridge %s: %w", bridgeName, err)
	}
	var named []leases.Lease
	err = store.Update(func(tx *leases.Tx) error {
		for _, l := range tx.Leases() {
			if l.Source != leases.SourceCNI || l.ContainerID == "" || l.BridgePort != "" {
				continue
			}
			if port := plugin.HostVethName(l.Key()); ports[port] {
				if nl, ok := tx.SetBridgePort(l.Key(), port); ok {
					named = append(named, nl)
				}
			}
		}
		return nil
	})
	for _, l := range named {
		log.Info("lease from before anti-spoofing: its port is checked from now on", "ip", l.IP, "mac", l.MAC, "port", l.BridgePort, "pod", l.Pod.Namespace+"/"+l.Pod.Name)
	}
	return err
}

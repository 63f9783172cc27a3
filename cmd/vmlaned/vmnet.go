//go:build linux || darwin

package main

// The vmnet configuration of a macOS node, apart from the darwin-only
// files so that its logic is tested on every system: pf's plist and
// network file code is plain Go.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os/exec"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmlane/vmlane/internal/command"
	"github.com/vmlane/vmlane/leases"
	"github.com/vmlane/vmlane/pf"
	pfvmnet "github.com/vmlane/vmlane/pf/vmnet"
)

// vmnet is the node's vmnet configuration and the watch on its bridge.
type vmnet struct {
	c    *config
	mode pf.VmnetMode
	log  *slog.Logger
	m    *vmnetMetrics
	// statePath is vmnet's state file (pf.DefaultVmnetStatePath),
	// ifaces lists the Mac's interfaces (interfaces) and sharedNAT reads
	// InternetSharing's NAT anchor (readSharedNAT); tests set them.
	statePath string
	ifaces    func() []pf.Iface
	sharedNAT func() pf.SharedNAT
	// run runs pkill to send bootpd SIGHUP (command.Exec when nil).
	run command.Runner
	// natUnknown is whether the last read of the anchor failed, so that
	// the failure is logged once, not every resync.
	natUnknown bool
	// h, when set, gets what the watch found for /healthz.
	h *health
	// now is the clock for the age of vmlane-vmnet's report (time.Now
	// when nil).
	now func() time.Time
}

// path says how this node puts vmnet on the podCIDR, for the log and
// /healthz.
func (v *vmnet) path() string {
	if v.mode == pf.ModeNetworkAPI {
		return "vmnet: macOS 26 and later: the network vmlane-vmnet holds (" + v.c.VmnetNetworkFile + ", " + v.c.VmnetStateFile + ")"
	}
	return "vmnet: macOS 15 and earlier: vmnet's plist (" + v.c.VmnetPlist + ")"
}

// configure tells vmnet the subnet. Up to macOS 15 that is vmnet's plist;
// from macOS 26, which ignores the plist's keys (docs/macos.md), it is the
// network description vmlane-vmnet makes the network from.
func (v *vmnet) configure(subnet netip.Prefix) error {
	if v.mode == pf.ModeNetworkAPI {
		if err := v.writeNetworkFile(subnet); err != nil {
			return err
		}
	} else if _, err := v.applyPlist(subnet); err != nil {
		return err
	}
	v.applyBootpd()
	return nil
}

// applyBootpd sets dhcp_ignore_client_identifier in bootpd's plist,
// unless --bootpd-ignore-client-id=false, and sends bootpd SIGHUP to read
// it when it wrote. InternetSharing writes the plist again whenever it
// starts the shared network, so the watch calls it every resync. A
// failure is logged: leases are then found by MAC only for guests that
// send their MAC as the client identifier (docs/macos.md).
func (v *vmnet) applyBootpd() {
	if v.c.BootpdKeepClientID {
		return
	}
	changed, err := pf.ApplyBootpdPlist(v.c.BootpdPlist, v.state())
	if err != nil {
		v.log.Error("setting "+pf.KeyIgnoreClientID+" in bootpd's plist: guests that send a DUID as their client identifier are not found by MAC", "plist", v.c.BootpdPlist, "err", err)
		return
	}
	if !changed {
		return
	}
	v.m.writes.WithLabelValues("bootpd").Inc()
	run := v.run
	if run == nil {
		run = command.Exec{}
	}
	// pkill exits 1 when no bootpd runs: launchd starts it when a
	// guest next asks, and it reads the plist then.
	out, err := run.Run("", "pkill", "-HUP", "-x", "bootpd")
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 1) {
		v.log.Warn("sending bootpd SIGHUP: it reads the plist when it next starts", "err", err, "output", out)
	}
	v.log.Info("set "+pf.KeyIgnoreClientID+" in bootpd's plist, so that leases are keyed on the guest's MAC", "plist", v.c.BootpdPlist)
}

// applyPlist writes the subnet into vmnet's plist when the plist says
// otherwise, and reports whether it wrote.
func (v *vmnet) applyPlist(subnet netip.Prefix) (bool, error) {
	changed, err := pf.ApplyPlist(v.c.VmnetPlist, v.state(), subnet)
	if err != nil {
		return false, err
	}
	if changed {
		v.m.writes.WithLabelValues("plist").Inc()
		v.log.Info("wrote vmnet's plist; vmnet moves its shared network there when it next starts it (when no VM uses it any more)",
			"plist", v.c.VmnetPlist, "subnet", subnet)
	}
	return changed, nil
}

func (v *vmnet) state() string {
	if v.statePath != "" {
		return v.statePath
	}
	return pf.DefaultVmnetStatePath
}

// writeNetworkFile writes the network description with the DHCP
// reservations of vmlane's lease file (--lease-file), if a VM runtime
// keeps one on this Mac: every live lease with a MAC.
func (v *vmnet) writeNetworkFile(subnet netip.Prefix) error {
	var res []pf.Reservation
	snap, err := leases.Read(v.c.LeaseFile)
	switch {
	case err == nil:
		for _, l := range snap.Compat() {
			if ip, err := netip.ParseAddr(l.IP); err == nil {
				res = append(res, pf.Reservation{MAC: l.MAC, IP: ip})
			}
		}
	case !errors.Is(err, fs.ErrNotExist):
		v.log.Warn("lease file unreadable; the network description has no reservations", "err", err)
	}
	n, problems, err := pf.NewNetwork(subnet, v.c.MTU, &pf.DNS{Nameservers: v.c.DNS, Search: v.c.Search, Domain: v.c.Domain}, res)
	if err != nil {
		return err
	}
	n.IPv6Prefix = v.c.PodCIDR6
	for _, p := range problems {
		v.log.Warn("lease left out of the network description", "problem", p)
	}
	wrote, err := pf.WriteNetworkFile(v.c.VmnetNetworkFile, v.state(), n)
	if err != nil {
		return err
	}
	if wrote {
		v.m.writes.WithLabelValues("network-file").Inc()
		v.log.Info("wrote the vmnet network description for vmlane-vmnet", "file", v.c.VmnetNetworkFile, "subnet", subnet, "reservations", len(n.Reservations))
	}
	return nil
}

// watch checks vmnet against podCIDR every resync period until ctx ends,
// and calls report with each finding, changed true when it differs from
// the one before (the first always does). Up to macOS 15 it reads vmnet's
// bridges, and on a mismatch writes the podCIDR into vmnet's plist again:
// vmnet rewrites Shared_Net_Address itself when its subnet is taken, so
// the plist written at start may say something else by now. From macOS 26
// it keeps the network description's reservations current and reads
// vmlane-vmnet's report (checkServed).
func (v *vmnet) watch(ctx context.Context, podCIDR netip.Prefix, report func(st pf.BridgeStatus, msg string, changed bool)) {
	tick := time.NewTicker(v.c.Resync)
	defer tick.Stop()
	last := "\x00" // no finding yet
	for {
		if v.mode == pf.ModeNetworkAPI {
			if err := v.writeNetworkFile(podCIDR); err != nil {
				v.log.Error("updating the network description", "err", err)
			}
		}
		ifaces := v.ifaces
		if ifaces == nil {
			ifaces = func() []pf.Iface { return interfaces(v.log) }
		}
		readNAT := v.sharedNAT
		if readNAT == nil {
			readNAT = v.readSharedNAT
		}
		v.applyBootpd()
		var st pf.BridgeStatus
		var msg string
		if v.mode == pf.ModeNetworkAPI {
			st, msg = v.checkServed(podCIDR)
		} else {
			st = pf.CheckBridge(ifaces(), podCIDR, readNAT())
			if st.State == pf.BridgeMismatch {
				if _, err := v.applyPlist(podCIDR); err != nil {
					v.log.Error("writing the podCIDR into vmnet's plist again", "err", err)
				}
			}
			msg = st.Message(podCIDR)
		}
		v.m.set(st)
		if v.h != nil {
			v.h.setDetail(v.path() + "\n" + msg)
		}
		key := fmt.Sprint(st.State, st.Bridges, msg)
		changed := key != last
		if changed {
			last = key
			if st.State == pf.BridgeMismatch {
				v.log.Warn(msg)
			} else {
				v.log.Info(msg)
			}
		}
		if report != nil {
			report(st, msg, changed)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// checkServed reads vmlane-vmnet's report against podCIDR (macOS 26 and
// later) as a bridge status: served on the podCIDR is a match, a network
// on another subnet a mismatch, anything else (not running, refused,
// waiting) is not served.
func (v *vmnet) checkServed(podCIDR netip.Prefix) (pf.BridgeStatus, string) {
	now := time.Now
	if v.now != nil {
		now = v.now
	}
	st, err := pfvmnet.ReadState(v.c.VmnetStateFile)
	verdict, msg := pfvmnet.CheckState(st, err, podCIDR, now())
	var out pf.BridgeStatus
	switch verdict {
	case pfvmnet.Served:
		out.State = pf.BridgeMatch
		if st.Bridge != "" {
			out.Bridges = []string{st.Bridge + " " + netip.PrefixFrom(podCIDR.Addr().Next(), podCIDR.Bits()).String()}
		}
	case pfvmnet.WrongSubnet:
		out.State = pf.BridgeMismatch
	default:
		out.State = pf.BridgeNotServed
	}
	return out, msg
}

// readSharedNAT reads InternetSharing's NAT anchor, which tells vmnet's
// shared network's bridge from a host-only one; a failed read leaves every
// vmnet bridge counted as the shared network's, and is logged once.
func (v *vmnet) readSharedNAT() pf.SharedNAT {
	nat, err := pf.ReadSharedNAT(command.Exec{})
	if err != nil {
		if !v.natUnknown {
			v.log.Warn("reading InternetSharing's NAT anchor failed: every vmnet bridge counts as the shared network's, a host-only one too", "anchor", pf.SharedNATAnchor, "err", err)
		}
		v.natUnknown = true
		return pf.SharedNAT{}
	}
	v.natUnknown = false
	return nat
}

func interfaces(log *slog.Logger) []pf.Iface {
	ifs, err := pf.Interfaces()
	if err != nil {
		log.Error("listing interfaces", "err", err)
	}
	return ifs
}

// vmnetMetrics are the macOS node's vmnet metrics.
type vmnetMetrics struct {
	mismatch, up, notServed prometheus.Gauge
	writes                  *prometheus.CounterVec
}

func newVmnetMetrics(reg prometheus.Registerer) *vmnetMetrics {
	m := &vmnetMetrics{
		mismatch:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "vmlane_vmnet_subnet_mismatch", Help: "1 while vmnet's shared network is up on a subnet other than the node's podCIDR."}),
		up:        prometheus.NewGauge(prometheus.GaugeOpts{Name: "vmlane_vmnet_bridge_up", Help: "1 while vmnet's shared network has a bridge with an IPv4 address (host-only networks do not count)."}),
		notServed: prometheus.NewGauge(prometheus.GaugeOpts{Name: "vmlane_vmnet_not_served", Help: "macOS 26 and later: 1 while vmlane-vmnet holds no network (not running, waiting, or vmnet refused it)."}),
		writes:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vmlane_vmnet_config_writes_total", Help: "Writes of vmnet's configuration, by file (plist, network-file, bootpd)."}, []string{"file"}),
	}
	reg.MustRegister(m.mismatch, m.up, m.notServed, m.writes)
	return m
}

func (m *vmnetMetrics) set(st pf.BridgeStatus) {
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	m.mismatch.Set(b(st.State == pf.BridgeMismatch))
	m.up.Set(b(st.State == pf.BridgeMatch || st.State == pf.BridgeMismatch))
	m.notServed.Set(b(st.State == pf.BridgeNotServed))
}

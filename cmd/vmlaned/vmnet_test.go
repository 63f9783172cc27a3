//go:build linux || darwin

package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmlane/vmlane/pf"
	pfvmnet "github.com/vmlane/vmlane/pf/vmnet"
)

// testVmnet is a vmnet whose files are in a temporary folder and whose
// interfaces are ifaces.
func testVmnet(t *testing.T, mode pf.VmnetMode, ifaces []pf.Iface) (*vmnet, *prometheus.Registry) {
	t.Helper()
	dir := t.TempDir()
	c := &config{
		VmnetPlist: filepath.Join(dir, "com.apple.vmnet.plist"), VmnetNetworkFile: filepath.Join(dir, "vmnet-network.json"),
		LeaseFile: filepath.Join(dir, "leases.json"), Resync: time.Hour, MTU: 1500,
		BootpdPlist: filepath.Join(dir, "bootpd.plist"),
	}
	reg := prometheus.NewRegistry()
	v := &vmnet{c: c, mode: mode, log: slog.New(slog.NewTextHandler(io.Discard, nil)), m: newVmnetMetrics(reg),
		statePath: filepath.Join(dir, "vmnet-state.json"), ifaces: func() []pf.Iface { return ifaces },
		sharedNAT: func() pf.SharedNAT { return pf.SharedNAT{} }}
	return v, reg
}

// TestVmnetHostOnlyIsNoMismatch: a host-only vmnet network up beside the
// shared one, or alone, as InternetSharing's NAT anchor tells them apart:
// only the shared network's bridge is compared with the podCIDR, so a
// host-only network is neither a mismatch (NetworkUnavailable, the plist
// written again) nor a match.
func TestVmnetHostOnlyIsNoMismatch(t *testing.T) {
	pod := netip.MustParsePrefix("10.244.9.0/24")
	hostOnly := pf.Iface{Name: "bridge100", Addrs: []netip.Prefix{netip.MustParsePrefix("192.168.128.1/24")}}
	shared := pf.Iface{Name: "bridge101", Addrs: []netip.Prefix{netip.MustParsePrefix("10.244.9.1/24")}}
	nat := "nat on en0 inet from 10.244.9.0/24 to any -> (en0:0) extfilter ei\nno nat on bridge101 inet from 10.244.9.1 to 10.244.9.0/24\n"
	for _, tc := range []struct {
		name   string
		ifaces []pf.Iface
		nat    string
		want   pf.BridgeState
	}{
		{"host-only alone", []pf.Iface{hostOnly}, "", pf.BridgeDown},
		{"host-only and shared at once", []pf.Iface{hostOnly, shared}, nat, pf.BridgeMatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, reg := testVmnet(t, pf.ModePlist, tc.ifaces)
			v.sharedNAT = func() pf.SharedNAT { return pf.ParseSharedNAT(tc.nat) }
			if err := v.configure(pod); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			var seen pf.BridgeState
			v.watch(ctx, pod, func(st pf.BridgeStatus, _ string, _ bool) { seen = st.State; cancel() })
			if seen != tc.want {
				t.Errorf("the watch saw %v, want %v", seen, tc.want)
			}
			if n := plistWrites(t, reg); n != 1 {
				t.Errorf("plist writes = %v, want 1 (start only: no mismatch)", n)
			}
		})
	}
}

func sharedNet(t *testing.T, path string) pf.SharedNet {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sn, err := pf.ReadSharedNet(data)
	if err != nil {
		t.Fatal(err)
	}
	return sn
}

// TestVmnetReappliesPlistOnMismatch: vmnet rewrote Shared_Net_Address (its
// subnet was taken) after vmlaned wrote the plist at start; the watch's
// next check finds the bridge on another subnet and writes the podCIDR
// into the plist again, counted in vmlane_vmnet_config_writes_total.
func TestVmnetReappliesPlistOnMismatch(t *testing.T) {
	pod := netip.MustParsePrefix("10.244.9.0/24")
	v, reg := testVmnet(t, pf.ModePlist, []pf.Iface{{Name: "bridge100", Addrs: []netip.Prefix{netip.MustParsePrefix("192.168.64.1/24")}}})
	if err := v.configure(pod); err != nil {
		t.Fatal(err)
	}
	// vmnet moves its network and says so in its plist.
	data, _ := os.ReadFile(v.c.VmnetPlist)
	moved, _, err := pf.EditPlist(data, pf.SharedNet{Address: "192.168.64.1", Mask: "255.255.255.0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(v.c.VmnetPlist, moved, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var seen pf.BridgeState
	v.watch(ctx, pod, func(st pf.BridgeStatus, _ string, _ bool) { seen = st.State; cancel() })
	if seen != pf.BridgeMismatch {
		t.Fatalf("the watch saw %v, want a mismatch", seen)
	}
	if got := sharedNet(t, v.c.VmnetPlist); got.Address != "10.244.9.1" || got.Mask != "255.255.255.0" {
		t.Errorf("plist after the mismatch says %+v, want the podCIDR again", got)
	}
	if n := plistWrites(t, reg); n != 2 {
		t.Errorf("plist writes = %v, want 2 (start, and the mismatch)", n)
	}
}

// TestVmnetOn26: on macOS 26 (ModeNetworkAPI) vmlaned writes the network
// description vmlane-vmnet makes the network from, the IPv6 pod prefix
// included, and leaves vmnet's plist alone (26 ignores its keys); its
// watch reads vmlane-vmnet's report: served on the podCIDR is ready, no
// report, a stale one or a refused network is not served, a network on
// another subnet a mismatch, and /healthz says which path and what it
// found.
func TestVmnetOn26(t *testing.T) {
	pod := netip.MustParsePrefix("10.244.9.0/24")
	v, reg := testVmnet(t, pf.ModeNetworkAPI, nil)
	v.c.VmnetStateFile = filepath.Join(t.TempDir(), "state.json")
	v.c.PodCIDR6 = netip.MustParsePrefix("fd00:10:244:9::/64")
	now := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	v.now = func() time.Time { return now }
	v.h = &health{}
	if err := v.configure(pod); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(v.c.VmnetPlist); err == nil {
		t.Error("vmnet's plist written on macOS 26")
	}
	var n pf.Network
	data, err := os.ReadFile(v.c.VmnetNetworkFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &n); err != nil || n.Subnet != pod || n.IPv6Prefix != v.c.PodCIDR6 {
		t.Fatalf("network description %+v, %v", n, err)
	}
	// The description is what vmlane-vmnet reads.
	if _, err := pfvmnet.SpecFrom(n, pfvmnet.Options{}); err != nil {
		t.Errorf("vmlane-vmnet would refuse the description: %v", err)
	}

	serving := pfvmnet.State{Updated: now.Add(-2 * time.Second), Network: "pod", Phase: pfvmnet.PhaseServing, Want: pod, Subnet: pod, Bridge: "bridge100", Clients: 2}
	for _, tc := range []struct {
		name  string
		state *pfvmnet.State
		want  pf.BridgeState
		msg   string
	}{
		{"no report", nil, pf.BridgeNotServed, "never reported"},
		{"served", &serving, pf.BridgeMatch, "serves the pod network"},
		{"stale", func() *pfvmnet.State { s := serving; s.Updated = now.Add(-time.Minute); return &s }(), pf.BridgeNotServed, "not reported since"},
		{"refused", &pfvmnet.State{Updated: now, Phase: pfvmnet.PhaseRefused, Want: pod, Message: "in use: utun4 10.244.0.2/16"}, pf.BridgeNotServed, "utun4"},
		{"elsewhere", func() *pfvmnet.State { s := serving; s.Subnet = netip.MustParsePrefix("10.244.3.0/24"); return &s }(), pf.BridgeMismatch, "not on podCIDR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(v.c.VmnetStateFile)
			if tc.state != nil {
				if err := pfvmnet.WriteState(v.c.VmnetStateFile, *tc.state); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			var got pf.BridgeStatus
			var msg string
			v.watch(ctx, pod, func(st pf.BridgeStatus, m string, _ bool) { got, msg = st, m; cancel() })
			if got.State != tc.want || !strings.Contains(msg, tc.msg) {
				t.Errorf("watch: %v %q, want %v and %q", got.State, msg, tc.want, tc.msg)
			}
			if d := v.h.details(); !strings.Contains(d, "vmlane-vmnet holds") || !strings.Contains(d, msg) {
				t.Errorf("/healthz detail %q", d)
			}
			if g := gauge(t, reg, "vmlane_vmnet_not_served"); (g == 1) != (tc.want == pf.BridgeNotServed) {
				t.Errorf("vmlane_vmnet_not_served %v", g)
			}
		})
	}
}

// gauge is the value of the gauge name in reg.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// plistWrites is vmlane_vmnet_config_writes_total{file="plist"}.
func plistWrites(t *testing.T, reg *prometheus.Registry) float64 {
	return configWrites(t, reg, "plist")
}

// configWrites is vmlane_vmnet_config_writes_total of file.
func configWrites(t *testing.T, reg *prometheus.Registry, file string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "vmlane_vmnet_config_writes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "file" && l.GetValue() == file {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// runs records the commands vmnet runs.
type runs struct{ calls []string }

func (r *runs) Run(_ string, argv ...string) (string, error) {
	r.calls = append(r.calls, strings.Join(argv, " "))
	return "", nil
}

// TestVmnetSetsBootpdIgnoreClientID: vmlaned sets the key in bootpd's
// plist at start and sends bootpd SIGHUP; when InternetSharing writes the
// plist again without it, the next resync sets it again; with
// --bootpd-ignore-client-id=false the plist is never touched.
func TestVmnetSetsBootpdIgnoreClientID(t *testing.T) {
	pod := netip.MustParsePrefix("10.244.9.0/24")
	sharing := []byte(`<?xml version="1.0" encoding="UTF-8"?>
<plist version="1.0"><dict><key>bootp_enabled</key><false/><key>dhcp_enabled</key><array><string>bridge100</string></array></dict></plist>
`)
	v, reg := testVmnet(t, pf.ModePlist, nil)
	r := &runs{}
	v.run = r
	os.WriteFile(v.c.BootpdPlist, sharing, 0o644)
	if err := v.configure(pod); err != nil {
		t.Fatal(err)
	}
	ignoring := func() bool {
		data, _ := os.ReadFile(v.c.BootpdPlist)
		on, _, err := pf.ReadIgnoreClientID(data)
		if err != nil {
			t.Fatal(err)
		}
		return on
	}
	if !ignoring() || !slices.Equal(r.calls, []string{"pkill -HUP -x bootpd"}) {
		t.Fatalf("after start: key set %v, commands %q", ignoring(), r.calls)
	}
	os.WriteFile(v.c.BootpdPlist, sharing, 0o644) // InternetSharing again
	ctx, cancel := context.WithCancel(context.Background())
	v.watch(ctx, pod, func(pf.BridgeStatus, string, bool) { cancel() })
	if !ignoring() || len(r.calls) != 2 {
		t.Errorf("after a resync: key set %v, commands %q", ignoring(), r.calls)
	}
	if n := configWrites(t, reg, "bootpd"); n != 2 {
		t.Errorf("bootpd writes = %v, want 2", n)
	}

	keep, _ := testVmnet(t, pf.ModePlist, nil)
	keep.c.BootpdKeepClientID = true
	keep.run = r
	os.WriteFile(keep.c.BootpdPlist, sharing, 0o644)
	if err := keep.configure(pod); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(keep.c.BootpdPlist); string(data) != string(sharing) || len(r.calls) != 2 {
		t.Errorf("--bootpd-ignore-client-id=false changed the plist or signalled bootpd: %q", r.calls)
	}
}

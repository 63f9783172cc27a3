package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmlane/vmlane/internal/antispoof"
	"github.com/vmlane/vmlane/leases"
	"github.com/vmlane/vmlane/plugin"
)

const repairFile = "/var/lib/vmlane/leases.json"

var repairSubnet = netip.MustParsePrefix("10.244.3.0/24")

// cacheFile is a libcni cache file for a vmlane attachment, as containerd
// writes it (the conflist as config, the result, the K8S_* args).
func cacheFile(t *testing.T, cid string, vm bool, ip, podMAC, tapMAC string) []byte {
	t.Helper()
	conf := map[string]any{"cniVersion": "1.0.0", "name": "vmlane", "plugins": []any{map[string]any{
		"type": "vmlane", "subnet": repairSubnet.String(), "vm": vm, "leaseFile": repairFile,
	}}}
	confBytes, _ := json.Marshal(conf)
	ifaces := []any{
		map[string]any{"name": "vmlane0", "mac": "02:76:0a:f4:03:01"},
		map[string]any{"name": "vmlx", "mac": "aa:aa:aa:aa:aa:aa"},
		map[string]any{"name": "eth0", "mac": podMAC, "sandbox": "/var/run/netns/cni-" + cid},
	}
	if vm {
		ifaces = append(ifaces, map[string]any{"name": "tap0", "mac": tapMAC, "sandbox": "/var/run/netns/cni-" + cid})
	}
	b, err := json.Marshal(map[string]any{
		"kind": "cniCacheV1", "containerId": cid, "config": confBytes, "ifName": "eth0", "networkName": "vmlane",
		"netns":   "/var/run/netns/cni-" + cid,
		"cniArgs": [][2]string{{"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", "pod-" + cid}, {"K8S_POD_UID", "uid-" + cid}},
		"result":  map[string]any{"cniVersion": "1.0.0", "interfaces": ifaces, "ips": []any{map[string]any{"address": ip + "/24", "interface": 2}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseCacheEntry(t *testing.T) {
	e, ok, err := parseCacheEntry(cacheFile(t, "vm1", true, "10.244.3.7", "5e:00:00:00:00:01", "02:76:0A:F4:03:07"))
	if err != nil || !ok {
		t.Fatalf("VM entry: ok %v, %v", ok, err)
	}
	if e.key.String() != "vm1/eth0" || e.ip.String() != "10.244.3.7" || e.mac != "02:76:0a:f4:03:07" || !e.vm || !e.antiSpoof ||
		e.subnet != repairSubnet || e.gateway.String() != "10.244.3.1" || e.leaseFile != repairFile || e.pod.Name != "pod-vm1" || e.pod.UID != "uid-vm1" {
		t.Errorf("VM entry %+v: want the TAP's MAC, the pod and the network's settings", e)
	}
	e, ok, err = parseCacheEntry(cacheFile(t, "p1", false, "10.244.3.8", "02:76:0a:f4:03:08", ""))
	if err != nil || !ok || e.mac != "02:76:0a:f4:03:08" || e.vm {
		t.Errorf("plain entry %+v, ok %v, %v: want the pod interface's MAC", e, ok, err)
	}
	other, _ := json.Marshal(map[string]any{"kind": "cniCacheV1", "containerId": "x", "ifName": "eth0",
		"config": []byte(`{"cniVersion":"1.0.0","name":"other","plugins":[{"type":"bridge"}]}`)})
	if _, ok, err := parseCacheEntry(other); ok || err != nil {
		t.Errorf("another plugin's entry: ok %v, %v; want skipped", ok, err)
	}
	noIP := strings.Replace(string(cacheFile(t, "p2", false, "10.244.3.9", "02:76:0a:f4:03:09", "")), `"ips":[{"address":"10.244.3.9/24","interface":2}]`, `"ips":[]`, 1)
	if _, ok, err := parseCacheEntry([]byte(noIP)); !ok || err == nil || !strings.Contains(err.Error(), "no address") {
		t.Errorf("a vmlane entry without an address: ok %v, %v; want it named", ok, err)
	}
}

func TestPlanRepair(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	entry := func(cid, ip, mac string, vm bool) cacheEntry {
		e, _, err := parseCacheEntry(cacheFile(t, cid, vm, ip, mac, mac))
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	port := func(cid string) string { return plugin.HostVethName(leases.Key{ContainerID: cid, IfName: "eth0"}) }
	mac := func(s string) net.HardwareAddr { m, _ := net.ParseMAC(s); return m }
	cache := []cacheEntry{
		entry("live", "10.244.3.2", "02:76:0a:f4:03:02", true),
		entry("gone", "10.244.3.3", "02:76:0a:f4:03:03", true),
		entry("moved", "10.244.3.4", "02:76:0a:f4:03:04", false),
		entry("bound", "10.244.3.5", "02:76:0a:f4:03:05", true),
		entry("other-file", "10.244.3.8", "02:76:0a:f4:03:08", false),
	}
	cache[4].leaseFile, cache[4].file = "/var/lib/other/leases.json", "results/vmlane-other-file-eth0"
	node := nodeState{
		ports: map[string]bool{port("live"): true, port("moved"): true, port("bound"): true, port("salv"): true, "vmlorphan": true},
		guarded: map[string]antispoof.Port{
			port("moved"): {Name: port("moved"), MAC: mac("02:76:0a:f4:03:44"), IP: netip.MustParseAddr("10.244.3.44")},
			"vmlorphan":   {Name: "vmlorphan", MAC: mac("02:76:0a:f4:03:63"), IP: netip.MustParseAddr("10.244.3.99")},
		},
	}
	salvaged := []leases.Lease{
		{MAC: "02:76:0a:f4:03:05", IP: netip.MustParseAddr("10.244.3.5"), State: leases.StateBound, Source: leases.SourceCNI,
			ContainerID: "bound", IfName: "eth0", Hostname: "guest-name", Expires: now.Add(time.Hour)},
		{MAC: "52:54:00:00:00:01", IP: netip.MustParseAddr("10.244.3.200"), State: leases.StateBound, Source: leases.SourceDHCP, Expires: now.Add(time.Hour)},
		{MAC: "52:54:00:00:00:02", IP: netip.MustParseAddr("10.244.3.201"), State: leases.StateBound, Source: leases.SourceDHCP, Expires: now.Add(-time.Hour)},
		{MAC: "02:76:0a:f4:03:06", IP: netip.MustParseAddr("10.244.3.6"), State: leases.StateReserved, Source: leases.SourceCNI, ContainerID: "salv", IfName: "eth0"},
		{MAC: "02:76:0a:f4:03:07", IP: netip.MustParseAddr("10.244.3.7"), State: leases.StateReserved, Source: leases.SourceCNI, ContainerID: "dead", IfName: "eth0"},
		{MAC: "52:54:00:00:00:03", IP: netip.MustParseAddr("10.244.3.2"), State: leases.StateBound, Source: leases.SourceDHCP, Expires: now.Add(time.Hour)},
		{MAC: "52:54:00:00:00:04", IP: netip.MustParseAddr("10.244.3.210"), State: "quarantined", Source: leases.SourceDHCP},
		// A second lease of the live attachment (a torn DEL+ADD): the
		// cache's, which the bridge confirms, is the one kept.
		{MAC: "02:76:0a:f4:03:12", IP: netip.MustParseAddr("10.244.3.12"), State: leases.StateReserved, Source: leases.SourceCNI, ContainerID: "live", IfName: "eth0"},
		// Reserved 10 s ago, its veth not made yet: an ADD under way.
		{MAC: "02:76:0a:f4:03:13", IP: netip.MustParseAddr("10.244.3.13"), State: leases.StateReserved, Source: leases.SourceCNI, ContainerID: "inflight", IfName: "eth0", Created: now.Add(-10 * time.Second)},
	}
	plan := planRepair(repairFile, repairSubnet, netip.Prefix{}, cache, node, salvaged, now)
	var got []string
	for _, l := range plan.leases {
		got = append(got, strings.Join([]string{l.IP.String(), l.MAC, string(l.State), l.Key().String(), l.BridgePort, l.Hostname}, " "))
	}
	want := []string{
		"10.244.3.2 02:76:0a:f4:03:02 reserved live/eth0 " + port("live") + " pod-live",     // cache, port live: vmlaned puts its entry back
		"10.244.3.5 02:76:0a:f4:03:05 bound bound/eth0 " + port("bound") + " guest-name",    // binding kept from the file
		"10.244.3.6 02:76:0a:f4:03:06 reserved salv/eth0  ",                                 // file only, port live
		"10.244.3.13 02:76:0a:f4:03:13 reserved inflight/eth0  ",                            // an ADD under way
		"10.244.3.44 02:76:0a:f4:03:44 reserved moved/eth0 " + port("moved") + " pod-moved", // the table wins
		"10.244.3.200 52:54:00:00:00:01 bound /  ",                                          // a dynamic lease, unexpired
		"10.244.3.210 52:54:00:00:00:04 quarantined /  ",                                    // a newer vmlane's, kept held
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("restored:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	notes := strings.Join(plan.notes, "\n")
	for _, w := range []string{
		"gone/eth0", "is not on the bridge", // a pod that is gone
		"dead/eth0",               // the file's, its veth gone
		"10.244.3.201", "expired", // an expired dynamic lease
		"10.244.3.2 52:54:00:00:00:03", "already restored", // a conflict with a live attachment
		"attachment live/eth0 already has its lease",                 // a second lease of one attachment
		"restored the latter",                                        // cache and table disagree
		"WARNING: port vmlorphan uses 02:76:0a:f4:03:63 10.244.3.99", // in use, no record
		"left out: CNI cache entry results/vmlane-other-file-eth0 (attachment other-file/eth0, network \"vmlane\"): its lease file is /var/lib/other/leases.json, not " + repairFile,
	} {
		if !strings.Contains(notes, w) {
			t.Errorf("notes lack %q:\n%s", w, notes)
		}
	}
}

func TestSubnetOf(t *testing.T) {
	e, _, _ := parseCacheEntry(cacheFile(t, "a", false, "10.244.3.2", "02:76:0a:f4:03:02", ""))
	other := e
	other.subnet = netip.MustParsePrefix("10.244.9.0/24")
	header := leases.File{Subnet: netip.MustParsePrefix("10.244.7.0/24"), Gateway: netip.MustParseAddr("10.244.7.1")}
	for _, c := range []struct {
		flag   string
		cache  []cacheEntry
		header leases.File
		want   string
	}{
		{"", []cacheEntry{e}, header, "10.244.3.0/24 10.244.3.1"},
		{"", nil, header, "10.244.7.0/24 10.244.7.1"},
		{"10.244.9.0/24", []cacheEntry{e, other}, header, "10.244.9.0/24 10.244.3.1"},
		{"", []cacheEntry{e, other}, header, "several subnets"},
		{"", nil, leases.File{}, "--subnet"},
		{"10.244.3.1/24", nil, header, "invalid value"},
	} {
		p, gw, err := subnetOf(c.flag, repairFile, c.cache, c.header)
		got := p.String() + " " + gw.String()
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, c.want) {
			t.Errorf("subnetOf(%q, %d entries) = %q, want %q", c.flag, len(c.cache), got, c.want)
		}
	}
}

// TestPlanRepairDualStack: a dual-stack node's rebuilt file keeps each
// attachment's IPv6 address (from the CNI result, or the anti-spoofing
// table where they differ) and its DHCPv6 binding, refuses an IPv6 address
// restored twice, and drops one outside the node's IPv6 subnet.
func TestPlanRepairDualStack(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	subnet6 := netip.MustParsePrefix("fd00:10:244:3::/64")
	a6 := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	entry := func(cid, ip, ip6, mac string) cacheEntry {
		return cacheEntry{key: leases.Key{ContainerID: cid, IfName: "eth0"}, leaseFile: repairFile, subnet: repairSubnet, subnet6: subnet6,
			ip: netip.MustParseAddr(ip), ip6: a6(ip6), mac: mac, antiSpoof: true}
	}
	port := func(cid string) string { return plugin.HostVethName(leases.Key{ContainerID: cid, IfName: "eth0"}) }
	m, _ := net.ParseMAC("02:76:0a:f4:03:03")
	cache := []cacheEntry{
		entry("a", "10.244.3.2", "fd00:10:244:3::2", "02:76:0a:f4:03:02"),
		entry("b", "10.244.3.3", "fd00:10:244:3::3", "02:76:0a:f4:03:03"),
		entry("c", "10.244.3.4", "fd00:10:244:3::2", "02:76:0a:f4:03:04"), // a's ip6 again
	}
	node := nodeState{
		ports:   map[string]bool{port("a"): true, port("b"): true, port("c"): true, port("d"): true},
		guarded: map[string]antispoof.Port{port("b"): {Name: port("b"), MAC: m, IP: a6("10.244.3.3"), IP6: a6("fd00:10:244:3::33")}},
	}
	salvaged := []leases.Lease{
		{MAC: "02:76:0a:f4:03:02", IP: a6("10.244.3.2"), IP6: a6("fd00:10:244:3::2"), State: leases.StateReserved, Source: leases.SourceCNI,
			ContainerID: "a", IfName: "eth0", State6: leases.StateBound, Expires6: now.Add(time.Hour)},
		{MAC: "02:76:0a:f4:03:05", IP: a6("10.244.3.5"), IP6: a6("fd00:99::5"), State: leases.StateReserved, Source: leases.SourceCNI,
			ContainerID: "d", IfName: "eth0"},
	}
	plan := planRepair(repairFile, repairSubnet, subnet6, cache, node, salvaged, now)
	var got []string
	for _, l := range plan.leases {
		got = append(got, fmt.Sprintf("%s %v %s", l.IP, l.IP6, l.State6))
	}
	want := []string{
		"10.244.3.2 fd00:10:244:3::2 bound", // the file's DHCPv6 binding kept
		"10.244.3.3 fd00:10:244:3::33 ",     // the table wins
		"10.244.3.5 invalid IP ",            // outside subnet6: dropped, the lease kept
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("restored:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	notes := strings.Join(plan.notes, "\n")
	for _, w := range []string{"fd00:10:244:3::2 is already restored", "IPv6 fd00:99::5 dropped", "anti-spoofing lets port " + port("b") + " use fd00:10:244:3::33"} {
		if !strings.Contains(notes, w) {
			t.Errorf("notes lack %q:\n%s", w, notes)
		}
	}
}

// TestCanonicalPath: however --lease-file and the CNI config spell one
// file, repair compares one string.
func TestCanonicalPath(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "var", "lib", "vmlane")
	if err := os.MkdirAll(real, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(real, "leases.json")
	if err := os.WriteFile(file, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	want := canonicalPath(file)
	t.Chdir(filepath.Join(dir, "var"))
	for _, p := range []string{
		file,
		"lib/vmlane/leases.json", // relative
		filepath.Join(dir, "var//lib/vmlane/leases.json"), // //
		filepath.Join(dir, "var/lib/../lib/vmlane/leases.json"),
		filepath.Join(dir, "link", "leases.json"), // through a symlink
	} {
		if got := canonicalPath(p); got != want {
			t.Errorf("canonicalPath(%q) = %q, want %q", p, got, want)
		}
	}
	// A missing file (repair of a deleted one) resolves through its folder.
	if got, want := canonicalPath(filepath.Join(dir, "link", "gone.json")), filepath.Join(filepath.Dir(want), "gone.json"); got != want {
		t.Errorf("missing file: %q, want %q", got, want)
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vmlane/vmlane/internal/version"
	"github.com/vmlane/vmlane/plugin"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestParseFlagsErrorsNameFlagAndValue(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "--node-name (or $NODE_NAME) is required"},
		{[]string{"--pod-cidr", "10.0.0.1/24"}, `invalid --pod-cidr "10.0.0.1/24"`},
		{[]string{"--pod-cidr", "fd00::/64"}, `invalid --pod-cidr "fd00::/64"`},
		{[]string{"--node-name", "a", "--cluster-cidr", "10.0.0.0/8,bogus"}, `invalid --cluster-cidr "bogus"`},
		{[]string{"--node-name", "a", "--route-protocol", "2"}, "invalid --route-protocol 2"},
		{[]string{"--node-name", "a", "--resync-period", "10ms"}, "invalid --resync-period 10ms"},
		{[]string{"--node-name", "a", "--mtu", "100"}, "invalid --mtu 100"},
		{[]string{"--node-name", "a", "--vm-hold-time", "0s"}, "invalid --vm-hold-time 0s: must be positive"},
		{[]string{"--node-name", "a", "--vm-hold-time", "-1h"}, "invalid --vm-hold-time -1h0m0s: must be positive"},
		{[]string{"--node-name", "a", "--dns", "8.8.8.8,x"}, `invalid --dns "x"`},
		{[]string{"--node-name", "a", "--log-level", "loud"}, `invalid --log-level "loud"`},
		{[]string{"--node-name", "a", "--health-addr", "9465"}, `invalid --health-addr "9465"`},
		{[]string{"--node-name", "a", "extra"}, `unexpected argument "extra"`},
		{[]string{"--node-name", "a", "--cni-version", "1.2.0"}, `invalid --cni-version "1.2.0"`},
		{[]string{"--node-name", "a", "--service-cidr", "10.96.0.1/12"}, `invalid --service-cidr "10.96.0.1/12": "10.96.0.1/12" is not a network CIDR`},
		{[]string{"--node-name", "a", "--service-cidr", "10.96.0.0/12,10.112.0.0/12"}, `invalid --service-cidr "10.96.0.0/12,10.112.0.0/12": two CIDRs of one family`},
		{[]string{"--node-name", "a", "--route-services"}, "--route-services needs --service-cidr"},
		{[]string{"--dhcp-range", "10.0.0.2-10.0.0.9"}, "--node-name (or $NODE_NAME) is required"},
		{[]string{"--routes-only", "--cross-subnet", "vxlan"}, "--cross-subnet vxlan needs --node-name"},
		{[]string{"--node-name", "a", "--cross-subnet", "gre"}, `invalid --cross-subnet "gre": want off, bgp, vxlan`},
		{[]string{"--pod-cidr", "10.0.0.0/24", "--cross-subnet", "vxlan"}, "--cross-subnet vxlan needs a cluster"},
		{[]string{"--node-name", "a", "--cross-subnet", "vxlan", "--vxlan-vni", "16777216"}, "invalid --vxlan-vni 16777216: want 1-16777215"},
		{[]string{"--node-name", "a", "--cross-subnet", "vxlan", "--vxlan-port", "0"}, "invalid --vxlan-port 0: want 1-65535"},
		{[]string{"--node-name", "a", "--cross-subnet", "bgp", "--bgp-asn", "0"}, `invalid --bgp-asn: ASN "0" is not 1-4294967294`},
		{[]string{"--node-name", "a", "--bgp-peer", "10.0.0.1"}, `invalid value "10.0.0.1" for flag -bgp-peer: peer "10.0.0.1": want ADDR:ASN`},
		{[]string{"--node-name", "a", "--bgp-peer", "fd00::1:65000"}, `peer "fd00::1:65000": "fd00" is not an IPv4 address (write an IPv6 one in brackets)`},
		{[]string{"--node-name", "a", "--bgp-router-id", "fd00::1"}, `invalid --bgp-router-id "fd00::1": want an IPv4 address`},
		{[]string{"--node-name", "a", "--bgp-password-file", "pw"}, `invalid --bgp-password-file "pw": want an absolute path`},
		{[]string{"--routes-only", "--node-name", "a", "--cross-subnet", "bgp"}, "--cross-subnet bgp announces this node's pod subnets"},
		{[]string{"--routes-only", "--node-name", "a", "--service-cidr", "bogus"}, `invalid --service-cidr "bogus"`},
	} {
		t.Setenv("NODE_NAME", "")
		_, err := parseFlags(tc.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseFlags(%q) = %v, want error containing %q", tc.args, err, tc.want)
		}
	}
	c, err := parseFlags([]string{"--node-name", "n1", "--cluster-cidr", "10.244.0.0/16", "--dns", "10.96.0.10"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.CrossSubnet != "off" || c.VXLANPort != 4789 || c.VXLANVNI != 30316 {
		t.Errorf("cross-subnet defaults: %q, port %d, VNI %d", c.CrossSubnet, c.VXLANPort, c.VXLANVNI)
	}
	if c.Resync != 30*time.Second || c.RouteProtocol != 77 || !c.Masquerade || c.HealthAddr != "127.0.0.1:9465" || c.MetricsAddr != "127.0.0.1:9464" {
		t.Errorf("defaults: %+v", c)
	}
}

// TestParseFlagsRoutesOnly: routes-only mode names the full-mode flags it
// ignores, ignores them even when their values would be refused in full
// mode (one DaemonSet template may carry both modes' flags), and keeps
// the flags it uses.
func TestParseFlagsRoutesOnly(t *testing.T) {
	c, err := parseFlags([]string{"--routes-only", "--node-name", "n1", "--bridge", "br9", "--mtu", "100", "--pod-cidr", "bogus",
		"--route-services", "--service-cidr", "10.96.0.0/12", "--resync-period", "5s", "--anti-spoof=false"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--anti-spoof", "--bridge", "--mtu", "--pod-cidr", "--route-services"}
	if diff := cmp.Diff(want, c.Ignored); diff != "" {
		t.Errorf("ignored flags (-want +got):\n%s", diff)
	}
	if !c.RoutesOnly || c.RouteServices || c.PodCIDR.IsValid() || c.MTU != 0 || c.Bridge != plugin.DefaultBridge || !c.AntiSpoof ||
		c.Resync != 5*time.Second || len(c.ServiceCIDRs) != 1 {
		t.Errorf("config %+v: want routes-only with the ignored flags at their defaults and the others kept", c)
	}
	if routeOptions(c).VMNodesOnly != true {
		t.Error("routes-only config does not make a VM-nodes-only route controller")
	}
	// A host that is not a node (a control plane): every node's subnets.
	cp, err := parseFlags([]string{"--routes-only", "--node-name", ""}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if o := routeOptions(cp); o.VMNodesOnly || o.NodeName != "" {
		t.Errorf("routes-only without a node name: options %+v, want every node routed", o)
	}
	full, err := parseFlags([]string{"--node-name", "n1", "--service-cidr", "10.96.0.0/12,fd00:96::/108", "--route-services"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if o := routeOptions(full); !o.RouteServices || len(o.Services) != 2 || o.VMNodesOnly || len(full.Ignored) != 0 {
		t.Errorf("full mode with --route-services: options %+v", o)
	}
}

func TestConflistGolden(t *testing.T) {
	for _, vm := range []bool{false, true} {
		p := conflistParams{
			Bridge: "vmlane0", Subnet: netip.MustParsePrefix("10.244.3.0/24"), Gateway: netip.MustParseAddr("10.244.3.1"),
			MTU: 1450, LeaseFile: "/var/lib/vmlane/leases.json", LeaseTime: time.Hour, VMHoldTime: 24 * time.Hour,
			DNS: []string{"10.96.0.10"}, Search: []string{"default.svc.cluster.local"}, Domain: "cluster.local", VM: vm,
		}
		got, err := renderConflist(p)
		if err != nil {
			t.Fatal(err)
		}
		golden := filepath.Join("testdata", conflistFile(vm))
		if *update {
			os.WriteFile(golden, got, 0o644)
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (run with -update to create)", err)
		}
		if diff := cmp.Diff(string(want), string(got)); diff != "" {
			t.Errorf("%s (-golden +got):\n%s", golden, diff)
		}
		// The plugin must accept what the daemon writes.
		var list struct{ Plugins []json.RawMessage }
		if err := json.Unmarshal(got, &list); err != nil || len(list.Plugins) != 2 {
			t.Fatalf("conflist: %v, %d plugins, want vmlane and portmap", err, len(list.Plugins))
		}
		if !strings.Contains(string(list.Plugins[1]), `"type": "portmap"`) {
			t.Errorf("second plugin %s, want portmap", list.Plugins[1])
		}
		conf := strings.Replace(string(list.Plugins[0]), "{", `{"cniVersion":"1.1.0","name":"vmlane",`, 1)
		c, err := plugin.ParseConfig([]byte(conf), nil)
		if err != nil {
			t.Fatalf("plugin rejects the daemon's conflist: %v", err)
		}
		if c.VM != vm || c.MTU != 1450 || c.Lease != time.Hour || c.VMHold != 24*time.Hour || c.GatewayAddr != p.Gateway {
			t.Errorf("plugin reads %+v", c)
		}
	}
}

// TestConflistCNIVersion: with --cni-version=auto, a runtime whose libcni
// reads cniVersions (containerd 2.x) runs the plugin at 1.1.0, which has
// STATUS and GC, and one that reads cniVersion alone (containerd 1.6 and
// 1.7, which reject a 1.1.0 result) at 1.0.0. A pinned version is written
// as it is, without cniVersions.
func TestConflistCNIVersion(t *testing.T) {
	base := conflistParams{Bridge: "vmlane0", Subnet: netip.MustParsePrefix("10.244.3.0/24"),
		Gateway: netip.MustParseAddr("10.244.3.1"), LeaseFile: "/var/lib/vmlane/leases.json", LeaseTime: time.Hour}
	for _, tc := range []struct {
		pin           string
		libcni, older string
	}{
		{"", "1.1.0", "1.0.0"},
		{"1.1.0", "1.1.0", "1.1.0"},
		{"0.4.0", "0.4.0", "0.4.0"},
	} {
		p := base
		p.CNIVersion = tc.pin
		data, err := renderConflist(p)
		if err != nil {
			t.Fatal(err)
		}
		list, err := libcni.NetworkConfFromBytes(data)
		if err != nil {
			t.Fatalf("pin %q: libcni rejects the conflist: %v", tc.pin, err)
		}
		if list.CNIVersion != tc.libcni {
			t.Errorf("pin %q: libcni runs the plugin at %s, want %s", tc.pin, list.CNIVersion, tc.libcni)
		}
		var raw struct {
			CNIVersion string `json:"cniVersion"`
		}
		if err := json.Unmarshal(data, &raw); err != nil || raw.CNIVersion != tc.older {
			t.Errorf("pin %q: cniVersion = %q (%v), want %s for runtimes without cniVersions", tc.pin, raw.CNIVersion, err, tc.older)
		}
	}
}

func TestWriteConflistOnlyOnChange(t *testing.T) {
	dir := t.TempDir()
	if wrote, err := writeConflist(dir, ConflistName, []byte("a")); !wrote || err != nil {
		t.Fatalf("first write = %v, %v", wrote, err)
	}
	if wrote, err := writeConflist(dir, ConflistName, []byte("a")); wrote || err != nil {
		t.Fatalf("same content = %v, %v; want no write", wrote, err)
	}
	if wrote, _ := writeConflist(dir, ConflistName, []byte("b")); !wrote {
		t.Fatal("changed content not written")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("temp files left: %v", ents)
	}
}

func TestHealth(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var last time.Time
	h := &health{start: start, window: 90 * time.Second, lastOK: func() time.Time { return last }}
	if err := h.healthy(start.Add(time.Minute)); err != nil {
		t.Errorf("young daemon unhealthy: %v", err)
	}
	if err := h.healthy(start.Add(2 * time.Minute)); err == nil {
		t.Error("no reconcile in 2m, still healthy")
	}
	last = start.Add(2 * time.Minute)
	if err := h.healthy(start.Add(3 * time.Minute)); err != nil {
		t.Errorf("recent reconcile: %v", err)
	}
	if err := h.healthy(start.Add(4 * time.Minute)); err == nil {
		t.Error("reconcile 2m old with a 90s window, still healthy")
	}
}

// --version prints the stamped release and stops; /metrics carries it as
// vmlane_build_info.
func TestVersion(t *testing.T) {
	old := version.Version
	t.Cleanup(func() { version.Version = old })
	version.Version = "v0.4.0"
	var stderr bytes.Buffer
	if _, err := parseFlags([]string{"--version"}, &stderr); err != flag.ErrHelp {
		t.Fatalf("parseFlags(--version) = %v, want flag.ErrHelp (exit 0)", err)
	}
	if got, want := stderr.String(), version.String("vmlaned")+"\n"; got != want {
		t.Errorf("--version printed %q, want %q", got, want)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(buildInfo())
	rec := httptest.NewRecorder()
	metricsHandler(reg).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	want := `vmlane_build_info{goversion="` + runtime.Version() + `",version="v0.4.0"} 1`
	if !strings.Contains(rec.Body.String(), want) {
		t.Errorf("/metrics has no %s:\n%s", want, rec.Body.String())
	}
}

package plugin

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/google/go-cmp/cmp"
	"github.com/vmlane/vmlane/internal/netaddr"
	"github.com/vmlane/vmlane/leases"
)

// netconf renders a vmlane network config: a minimal valid one with set
// merged over it. A nil value in set deletes the key.
func netconf(t testing.TB, set map[string]any) []byte {
	t.Helper()
	m := map[string]any{
		"cniVersion": "1.1.0",
		"name":       "vmlane",
		"type":       "vmlane",
		"subnet":     "10.244.3.0/24",
	}
	for k, v := range set {
		if v == nil {
			delete(m, k)
			continue
		}
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// cniError asserts err is a *types.Error and returns it.
func cniError(t testing.TB, err error) *types.Error {
	t.Helper()
	var e *types.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not a *types.Error", err, err)
	}
	return e
}

func constMTU(n int) func() int { return func() int { return n } }

func TestConfigDefaults(t *testing.T) {
	// What ParseConfig fills in, as a comparable projection of Config.
	type view struct {
		Bridge, TapName, LeaseFile string
		Subnet, Gateway            string
		MTU                        int
		Lease                      time.Duration
		MAC, IP                    string
		Exclude                    string
		TapUID, TapGID             uint32
	}
	project := func(c *Config) view {
		v := view{
			Bridge: c.Bridge, TapName: c.TapName, LeaseFile: c.LeaseFile,
			Subnet: c.SubnetPrefix.String(), Gateway: c.GatewayAddr.String(),
			MTU: c.MTU, Lease: c.Lease, MAC: c.MAC, TapUID: c.TapUID, TapGID: c.TapGID,
		}
		if c.IP.IsValid() {
			v.IP = c.IP.String()
		}
		if c.Exclude.First.IsValid() {
			v.Exclude = c.Exclude.String()
		}
		return v
	}
	base := view{
		Bridge: "vmlane0", LeaseFile: "/var/lib/vmlane/leases.json",
		Subnet: "10.244.3.0/24", Gateway: "10.244.3.1", MTU: 9000, Lease: time.Hour,
	}
	with := func(f func(*view)) view { v := base; f(&v); return v }

	tests := []struct {
		name       string
		set        map[string]any
		defaultMTU func() int
		want       view
	}{
		{name: "defaults", defaultMTU: constMTU(9000), want: base},
		{name: "no default route: 1500", defaultMTU: constMTU(0), want: with(func(v *view) { v.MTU = 1500 })},
		{name: "nil defaultMTU: 1500", defaultMTU: nil, want: with(func(v *view) { v.MTU = 1500 })},
		{
			name:       "mtu set: defaultMTU not consulted",
			set:        map[string]any{"mtu": 1450},
			defaultMTU: func() int { t.Error("defaultMTU called though the config sets mtu"); return 9000 },
			want:       with(func(v *view) { v.MTU = 1450 }),
		},
		{name: "gateway = first host of a /16", set: map[string]any{"subnet": "10.100.0.0/16"}, defaultMTU: constMTU(9000),
			want: with(func(v *view) { v.Subnet, v.Gateway = "10.100.0.0/16", "10.100.0.1" })},
		{name: "gateway given", set: map[string]any{"gateway": "10.244.3.254"}, defaultMTU: constMTU(9000),
			want: with(func(v *view) { v.Gateway = "10.244.3.254" })},
		{name: "smallest subnet /30", set: map[string]any{"subnet": "10.244.3.0/30"}, defaultMTU: constMTU(9000),
			want: with(func(v *view) { v.Subnet = "10.244.3.0/30" })},
		{name: "leaseTime duration", set: map[string]any{"leaseTime": "90m"}, defaultMTU: constMTU(9000),
			want: with(func(v *view) { v.Lease = 90 * time.Minute })},
		{name: "leaseTime seconds", set: map[string]any{"leaseTime": 5400}, defaultMTU: constMTU(9000),
			want: with(func(v *view) { v.Lease = 90 * time.Minute })},
		{name: "leaseTime null", set: map[string]any{"leaseTime": json.RawMessage("null")}, defaultMTU: constMTU(9000), want: base},
		{name: "names and paths", set: map[string]any{"bridge": "br-vm", "tapName": "vmtap", "leaseFile": "/run/vmlane/l.json"},
			defaultMTU: constMTU(9000), want: with(func(v *view) { v.Bridge, v.TapName, v.LeaseFile = "br-vm", "vmtap", "/run/vmlane/l.json" })},
		{name: "TAP owner and group as numbers", set: map[string]any{"tapOwner": 107, "tapGroup": "107"}, defaultMTU: constMTU(9000),
			want: with(func(v *view) { v.TapUID, v.TapGID = 107, 107 })},
		{name: "TAP owner and group by name", set: map[string]any{"tapOwner": "root", "tapGroup": "root"}, defaultMTU: constMTU(9000), want: base},
		{name: "TAP owner null", set: map[string]any{"tapOwner": json.RawMessage("null")}, defaultMTU: constMTU(9000), want: base},
		{name: "15-byte bridge name", set: map[string]any{"bridge": "abcdefghijklmno"}, defaultMTU: constMTU(9000),
			want: with(func(v *view) { v.Bridge = "abcdefghijklmno" })},
		{name: "mtu bounds", set: map[string]any{"mtu": 576}, defaultMTU: constMTU(9000), want: with(func(v *view) { v.MTU = 576 })},
		{name: "excludeRange", set: map[string]any{"excludeRange": "10.244.3.128-10.244.3.254"}, defaultMTU: constMTU(9000),
			want: with(func(v *view) { v.Exclude = "10.244.3.128-10.244.3.254" })},
		{name: "runtime mac normalized", set: map[string]any{"runtimeConfig": map[string]any{"mac": "0A:58:0A:F4:03:07"}},
			defaultMTU: constMTU(9000), want: with(func(v *view) { v.MAC = "0a:58:0a:f4:03:07" })},
		{name: "runtime ip as CIDR", set: map[string]any{"runtimeConfig": map[string]any{"ips": []string{"10.244.3.7/24"}}},
			defaultMTU: constMTU(9000), want: with(func(v *view) { v.IP = "10.244.3.7" })},
		{name: "runtime ip bare", set: map[string]any{"runtimeConfig": map[string]any{"ips": []string{"10.244.3.7"}}},
			defaultMTU: constMTU(9000), want: with(func(v *view) { v.IP = "10.244.3.7" })},
		{
			name:       "runtime IPv6 ip is another plugin's",
			set:        map[string]any{"runtimeConfig": map[string]any{"ips": []string{"fd00::7/64", "10.244.3.7/24", "fd00::8"}}},
			defaultMTU: constMTU(9000),
			want:       with(func(v *view) { v.IP = "10.244.3.7" }),
		},
		{name: "runtime only IPv6", set: map[string]any{"runtimeConfig": map[string]any{"ips": []string{"fd00::7/64"}}},
			defaultMTU: constMTU(9000), want: base},
		{name: "logLevel any case", set: map[string]any{"logLevel": "Debug"}, defaultMTU: constMTU(9000), want: base},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig(netconf(t, tc.set), tc.defaultMTU)
			if err != nil {
				t.Fatalf("ParseConfig: %v", err)
			}
			if diff := cmp.Diff(tc.want, project(c)); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConfigDNS(t *testing.T) {
	dns := map[string]any{"nameservers": []string{"10.96.0.10", "fd00::a"}, "search": []string{"svc.cluster.local"}, "domain": "cluster.local"}
	c, err := ParseConfig(netconf(t, map[string]any{"dns": dns}), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := DNS{Nameservers: []string{"10.96.0.10", "fd00::a"}, Search: []string{"svc.cluster.local"}, Domain: "cluster.local"}
	if diff := cmp.Diff(want, c.DNS); diff != "" {
		t.Errorf("DNS (-want +got):\n%s", diff)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name  string
		set   map[string]any
		field string // the field the message must name
		value string // the value the message must name
	}{
		{"no subnet", map[string]any{"subnet": nil}, "subnet", `""`},
		{"bad CIDR", map[string]any{"subnet": "10.244.3.0/33"}, "subnet", "10.244.3.0/33"},
		{"not a CIDR", map[string]any{"subnet": "pods"}, "subnet", "pods"},
		{"host bits set", map[string]any{"subnet": "10.244.3.7/24"}, "subnet", "10.244.3.7/24"},
		{"IPv6 subnet", map[string]any{"subnet": "fd00:10:244::/64"}, "subnet", "fd00:10:244::/64"},
		{"/31", map[string]any{"subnet": "10.244.3.0/31"}, "subnet", "10.244.3.0/31"},
		{"/32", map[string]any{"subnet": "10.244.3.0/32"}, "subnet", "10.244.3.0/32"},
		{"gateway outside subnet", map[string]any{"gateway": "10.244.4.1"}, "gateway", "10.244.4.1"},
		{"gateway is network", map[string]any{"gateway": "10.244.3.0"}, "gateway", "10.244.3.0"},
		{"gateway is broadcast", map[string]any{"gateway": "10.244.3.255"}, "gateway", "10.244.3.255"},
		{"gateway is broadcast of /30", map[string]any{"subnet": "10.244.3.0/30", "gateway": "10.244.3.3"}, "gateway", "10.244.3.3"},
		{"bad gateway", map[string]any{"gateway": "10.244.3.x"}, "gateway", "10.244.3.x"},
		{"IPv6 gateway", map[string]any{"gateway": "fd00::1"}, "gateway", "fd00::1"},
		{"mtu 100", map[string]any{"mtu": 100}, "mtu", "100"},
		{"mtu 70000", map[string]any{"mtu": 70000}, "mtu", "70000"},
		{"mtu negative", map[string]any{"mtu": -1}, "mtu", "-1"},
		{"bridge too long", map[string]any{"bridge": "abcdefghijklmnop"}, "bridge", "abcdefghijklmnop"},
		{"bridge with slash", map[string]any{"bridge": "br/0"}, "bridge", "br/0"},
		{"bridge with colon", map[string]any{"bridge": "br:0"}, "bridge", "br:0"},
		{"bridge with space", map[string]any{"bridge": "br 0"}, "bridge", "br 0"},
		{"bridge dot", map[string]any{"bridge": "."}, "bridge", `"."`},
		{"tapName dotdot", map[string]any{"tapName": ".."}, "tapName", `".."`},
		{"tapName too long", map[string]any{"tapName": "tap-0123456789ab"}, "tapName", "tap-0123456789ab"},
		{"tapName with slash", map[string]any{"tapName": "tap/0"}, "tapName", "tap/0"},
		{"tapOwner no such user", map[string]any{"tapOwner": "vmlane-nosuch"}, "tapOwner", "vmlane-nosuch"},
		{"tapGroup no such group", map[string]any{"tapGroup": "vmlane-nosuch"}, "tapGroup", "vmlane-nosuch"},
		{"tapOwner negative", map[string]any{"tapOwner": -1}, "tapOwner", "-1"},
		{"tapOwner -1 as 32 bits", map[string]any{"tapOwner": 4294967295}, "tapOwner", "4294967295"},
		{"tapOwner beyond 32 bits", map[string]any{"tapOwner": 1 << 33}, "tapOwner", "8589934592"},
		{"tapOwner fraction", map[string]any{"tapOwner": 1.5}, "tapOwner", "1.5"},
		{"tapGroup object", map[string]any{"tapGroup": map[string]any{}}, "tapGroup", "{}"},
		{"tapGroup empty", map[string]any{"tapGroup": ""}, "tapGroup", `""`},
		{"podMAC neither", map[string]any{"podMAC": "host"}, "podMAC", "host"},
		{"relative leaseFile", map[string]any{"leaseFile": "leases.json"}, "leaseFile", "leases.json"},
		{"nameserver not an IP", map[string]any{"dns": map[string]any{"nameservers": []string{"10.96.0.10", "kube-dns"}}}, "dns.nameservers", "kube-dns"},
		{"leaseTime 10s", map[string]any{"leaseTime": "10s"}, "leaseTime", "10s"},
		{"leaseTime 10 seconds", map[string]any{"leaseTime": 10}, "leaseTime", "10"},
		{"leaseTime abc", map[string]any{"leaseTime": "abc"}, "leaseTime", "abc"},
		{"leaseTime true", map[string]any{"leaseTime": true}, "leaseTime", "true"},
		{"leaseTime object", map[string]any{"leaseTime": map[string]any{}}, "leaseTime", "{}"},
		{"leaseTime beyond 32 bits", map[string]any{"leaseTime": 1 << 33}, "leaseTime", "8589934592"},
		{"leaseTime negative", map[string]any{"leaseTime": "-1h"}, "leaseTime", "-1h"},
		{"excludeRange outside subnet", map[string]any{"excludeRange": "10.244.4.10-10.244.4.20"}, "excludeRange", "10.244.4.10-10.244.4.20"},
		{"excludeRange reaches broadcast", map[string]any{"excludeRange": "10.244.3.200-10.244.3.255"}, "excludeRange", "10.244.3.200-10.244.3.255"},
		{"excludeRange backwards", map[string]any{"excludeRange": "10.244.3.20-10.244.3.10"}, "excludeRange", "10.244.3.20-10.244.3.10"},
		{"excludeRange no dash", map[string]any{"excludeRange": "10.244.3.20"}, "excludeRange", "10.244.3.20"},
		{"logLevel bogus", map[string]any{"logLevel": "bogus"}, "logLevel", "bogus"},
		{"runtime mac bad", map[string]any{"runtimeConfig": map[string]any{"mac": "02:76:0a:f4:03"}}, "runtimeConfig.mac", "02:76:0a:f4:03"},
		{"runtime mac not hex", map[string]any{"runtimeConfig": map[string]any{"mac": "zz:76:0a:f4:03:07"}}, "runtimeConfig.mac", "zz:76:0a:f4:03:07"},
		{"runtime mac multicast", map[string]any{"runtimeConfig": map[string]any{"mac": "03:76:0a:f4:03:07"}}, "runtimeConfig.mac", "03:76:0a:f4:03:07"},
		{"runtime mac is the gateway's", map[string]any{"runtimeConfig": map[string]any{"mac": "02:76:00:00:00:01"}}, "runtimeConfig.mac", "02:76:00:00:00:01"},
		{"runtime mac broadcast", map[string]any{"runtimeConfig": map[string]any{"mac": "ff:ff:ff:ff:ff:ff"}}, "runtimeConfig.mac", "ff:ff:ff:ff:ff:ff"},
		{"runtime ip outside subnet", map[string]any{"runtimeConfig": map[string]any{"ips": []string{"10.244.4.7/24"}}}, "runtimeConfig.ips", "10.244.4.7/24"},
		{"runtime ip not an IP", map[string]any{"runtimeConfig": map[string]any{"ips": []string{"ten"}}}, "runtimeConfig.ips", "ten"},
		{"runtime two IPv4s", map[string]any{"runtimeConfig": map[string]any{"ips": []string{"10.244.3.7/24", "10.244.3.8/24"}}}, "runtimeConfig.ips", "10.244.3.8/24"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig(netconf(t, tc.set), constMTU(1500))
			if err == nil {
				t.Fatalf("ParseConfig accepted the config: %+v", c)
			}
			e := cniError(t, err)
			if e.Code != types.ErrInvalidNetworkConfig {
				t.Errorf("code %d, want %d (invalid network config); error: %v", e.Code, types.ErrInvalidNetworkConfig, e)
			}
			if !strings.Contains(e.Msg, tc.field+" ") {
				t.Errorf("message %q does not name field %q", e.Msg, tc.field)
			}
			if !strings.Contains(e.Msg, tc.value) {
				t.Errorf("message %q does not name value %s", e.Msg, tc.value)
			}
		})
	}
}

func TestConfigDecodingErrors(t *testing.T) {
	for _, in := range []string{
		`{"cniVersion":"1.1.0","subnet":"10.244.3.0/24"`, // truncated
		`not json`,
		``,
		`{"subnet": 10}`,  // wrong type
		`{"vm": "yes"}`,   // wrong type
		`{"mtu": "1500"}`, // wrong type
		`{"dns": ["x"]}`,  // wrong type
		`{"runtimeConfig": {"ips": "10.244.3.7"}}`, // wrong type
	} {
		t.Run(in, func(t *testing.T) {
			_, err := ParseConfig([]byte(in), nil)
			if err == nil {
				t.Fatal("ParseConfig accepted it")
			}
			if e := cniError(t, err); e.Code != types.ErrDecodingFailure {
				t.Errorf("code %d, want %d (decoding failure); error: %v", e.Code, types.ErrDecodingFailure, e)
			}
		})
	}
}

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name string
		args string
		want leases.Pod
		code uint // 0: no error
	}{
		{name: "empty", args: ""},
		{
			name: "kubernetes",
			args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=c0ffee;K8S_POD_UID=9b5e1c2a",
			want: leases.Pod{Namespace: "default", Name: "web-0", UID: "9b5e1c2a"},
		},
		{
			name: "kubernetes without IgnoreUnknown",
			args: "K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=vm-1;K8S_POD_UID=u1",
			want: leases.Pod{Namespace: "kube-system", Name: "vm-1", UID: "u1"},
		},
		{name: "unknown key", args: "K8S_POD_NAME=web-0;FOO=bar", code: types.ErrInvalidEnvironmentVariables},
		{name: "unknown key ignored", args: "IgnoreUnknown=1;K8S_POD_NAME=web-0;FOO=bar", want: leases.Pod{Name: "web-0"}},
		{name: "unknown key ignored, true", args: "IgnoreUnknown=true;FOO=bar"},
		{name: "IgnoreUnknown=0", args: "IgnoreUnknown=0;FOO=bar", code: types.ErrInvalidEnvironmentVariables},
		{name: "no equals sign", args: "K8S_POD_NAME", code: types.ErrInvalidEnvironmentVariables},
		{name: "bad IgnoreUnknown", args: "IgnoreUnknown=maybe", code: types.ErrInvalidEnvironmentVariables},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseArgs(tc.args)
			if tc.code != 0 {
				if err == nil {
					t.Fatalf("ParseArgs(%q) = %+v, want error code %d", tc.args, got, tc.code)
				}
				if e := cniError(t, err); e.Code != tc.code {
					t.Errorf("code %d, want %d; error: %v", e.Code, tc.code, e)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseArgs(%q): %v", tc.args, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("pod (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzParseConfig: any input is either rejected with a CNI error of code 6
// (undecodable) or 7 (invalid), or yields a config the rest of the plugin
// can rely on.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		`{"cniVersion":"1.1.0","name":"vmlane","type":"vmlane","subnet":"10.244.3.0/24"}`,
		`{"subnet":"10.244.3.0/30","gateway":"10.244.3.2","mtu":9000,"vm":true,"tapName":"t0"}`,
		`{"subnet":"10.0.0.0/8","leaseTime":5400,"excludeRange":"10.0.0.100-10.0.0.200"}`,
		`{"subnet":"10.244.3.0/24","runtimeConfig":{"mac":"0a:58:0a:f4:03:07","ips":["10.244.3.7/24","fd00::1"]}}`,
		`{"subnet":"10.244.3.0/24","dns":{"nameservers":["10.96.0.10"]},"leaseTime":"90m","logLevel":"debug"}`,
	} {
		f.Add([]byte(s))
	}
	// Store paths live here: the fuzzed leaseFile could be anywhere, and
	// leases.Open creates folders.
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := ParseConfig(in, constMTU(1500))
		if err != nil {
			var e *types.Error
			if !errors.As(err, &e) || (e.Code != types.ErrDecodingFailure && e.Code != types.ErrInvalidNetworkConfig) {
				t.Fatalf("error %v (%T) is not a CNI error of code 6 or 7", err, err)
			}
			return
		}
		p := c.SubnetPrefix
		switch {
		case !p.Addr().Is4() || p != p.Masked() || p.Bits() > 30:
			t.Fatalf("accepted subnet %s", p)
		case !p.Contains(c.GatewayAddr) || c.GatewayAddr == p.Addr() || c.GatewayAddr == netaddr.LastAddr(p):
			t.Fatalf("accepted gateway %s for %s", c.GatewayAddr, p)
		case c.MTU < minMTU || c.MTU > maxMTU:
			t.Fatalf("accepted mtu %d", c.MTU)
		case len(c.Bridge) == 0 || len(c.Bridge) > 15 || checkIfName("tapName", c.TapFor("eth0")) != nil:
			t.Fatalf("accepted names %q, %q", c.Bridge, c.TapFor("eth0"))
		case !strings.HasPrefix(c.LeaseFile, "/"):
			t.Fatalf("accepted leaseFile %q", c.LeaseFile)
		case c.Lease < time.Minute:
			t.Fatalf("accepted leaseTime %s", c.Lease)
		case c.IP.IsValid() && !p.Contains(c.IP):
			t.Fatalf("accepted runtime ip %s outside %s", c.IP, p)
		}
		if c.MAC != "" {
			if m, err := leases.NormalizeMAC(c.MAC); err != nil || m != c.MAC {
				t.Fatalf("accepted runtime mac %q", c.MAC)
			}
		}
		if _, err := leases.Open(filepath.Join(dir, "leases.json"), p, c.GatewayAddr); err != nil {
			t.Fatalf("ParseConfig accepted subnet %s / gateway %s that the lease store rejects: %v", p, c.GatewayAddr, err)
		}
	})
}

// TestConfigRejectsKernelTemplatesAndZeroMAC: values the kernel or a guest
// cannot use as given must be config errors too.
func TestConfigRejectsKernelTemplatesAndZeroMAC(t *testing.T) {
	for _, tc := range []struct {
		set          map[string]any
		field, value string
	}{
		{map[string]any{"bridge": "vm%d"}, "bridge", "vm%d"},
		{map[string]any{"tapName": "tap%d"}, "tapName", "tap%d"},
		{map[string]any{"runtimeConfig": map[string]any{"mac": "00:00:00:00:00:00"}}, "runtimeConfig.mac", "00:00:00:00:00:00"},
	} {
		_, err := ParseConfig(netconf(t, tc.set), nil)
		if err == nil {
			t.Errorf("ParseConfig accepted %s %q", tc.field, tc.value)
			continue
		}
		if e := cniError(t, err); e.Code != types.ErrInvalidNetworkConfig || !strings.Contains(e.Msg, tc.field) || !strings.Contains(e.Msg, tc.value) {
			t.Errorf("error %v (code %d) does not name %s %q", e, e.Code, tc.field, tc.value)
		}
	}
}

func TestTapFor(t *testing.T) {
	for _, tc := range []struct{ tapName, ifName, want string }{
		{"", "eth0", "tap0"},
		{"", "net1", "tap1"},
		{"", "net12", "tap12"},
		{"", "pod1a2b3c4d5e6", "tap1a2b3c4d5e6"}, // KubeVirt's hashed pod interfaces
		{"", "tap5", "tap-tap5"},                 // never the ifname itself
		{"", "e0", "tap-e0"},
		{"", "eth", "tap-eth"},
		{"", "tapabcdefghijkl", "tap-tapabcdefgh"},
		{"vmtap", "net1", "vmtap"},
	} {
		c := &Config{NetConf: NetConf{TapName: tc.tapName}}
		got := c.TapFor(tc.ifName)
		if got != tc.want || len(got) > 15 || got == tc.ifName {
			t.Errorf("tapName %q, ifname %q: TAP %q, want %q", tc.tapName, tc.ifName, got, tc.want)
		}
	}
}

package plugin

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/google/go-cmp/cmp"
)

// dual is the dual-stack config the tests below add to the defaults.
var dual = map[string]any{"subnet6": "fd00:10:244:3::/64"}

func dualConf(set map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range dual {
		out[k] = v
	}
	for k, v := range set {
		out[k] = v
	}
	return out
}

// bridgeState6 is what a dual-stack ADD adds to bridgeState.
var bridgeState6 = []string{
	"ip addr add fd00:10:244:3::1/64 dev vmlane0",
	"sysctl -w net.ipv6.conf.all.forwarding=1",
}

func TestPluginAddDualStack(t *testing.T) {
	a := att("a")
	a.args = k8sArgs
	t.Run("plain", func(t *testing.T) {
		h := newHarness(t, dualConf(nil))
		r := h.mustAdd(a, nil)
		ns := "/run/netns/a"
		h.wantState(concat(bridgeState, bridgeState6, plainState("a", "10.244.3.2"), []string{
			"ip -n " + ns + " addr add fd00:10:244:3::2/64 dev eth0",
			"ip -n " + ns + " -6 route add default via fd00:10:244:3::1 dev eth0",
			"nft add element bridge vmlane addrs6 { {veth:a} . 02:76:0a:f4:03:02 . fd00:10:244:3::2 }",
		}))
		want := []string{"10.244.3.2/24 gw 10.244.3.1 on 2", "fd00:10:244:3::2/64 gw fd00:10:244:3::1 on 2"}
		if d := cmp.Diff(want, ipLines(r)); d != "" {
			t.Errorf("result ips (-want +got):\n%s", d)
		}
		var routes []string
		for _, rt := range r.Routes {
			routes = append(routes, rt.Dst.String()+" via "+rt.GW.String())
		}
		if d := cmp.Diff([]string{"0.0.0.0/0 via 10.244.3.1", "::/0 via fd00:10:244:3::1"}, routes); d != "" {
			t.Errorf("result routes (-want +got):\n%s", d)
		}
		l, ok := h.leaseOf(a)
		if !ok || l.IP6.String() != "fd00:10:244:3::2" {
			t.Fatalf("lease %+v, want ip6 fd00:10:244:3::2", l)
		}
	})
	t.Run("vm", func(t *testing.T) {
		h := newHarness(t, dualConf(map[string]any{"vm": true}))
		r := h.mustAdd(a, nil)
		// The guest configures both addresses itself (DHCPv4, RA +
		// DHCPv6): nothing of either goes in the pod's netns.
		h.wantState(concat(bridgeState, bridgeState6, vmState("a", "10.244.3.2", "02:76:0a:f4:03:02"),
			[]string{"nft add element bridge vmlane addrs6 { {veth:a} . 02:76:0a:f4:03:02 . fd00:10:244:3::2 }"}))
		want := []string{"10.244.3.2/24 gw 10.244.3.1 on 2", "fd00:10:244:3::2/64 gw fd00:10:244:3::1 on 2"}
		if d := cmp.Diff(want, ipLines(r)); d != "" {
			t.Errorf("result ips (-want +got):\n%s", d)
		}
		if l, ok := h.leaseOf(a); !ok || l.IP6.String() != "fd00:10:244:3::2" || !l.VM {
			t.Fatalf("lease %+v, want a VM lease with ip6 fd00:10:244:3::2", l)
		}
	})
	t.Run("requested ips", func(t *testing.T) {
		h := newHarness(t, dualConf(nil))
		r := h.mustAdd(a, map[string]any{"runtimeConfig": map[string]any{"ips": []string{"fd00:10:244:3::99/64", "10.244.3.77/24"}}})
		want := []string{"10.244.3.77/24 gw 10.244.3.1 on 2", "fd00:10:244:3::99/64 gw fd00:10:244:3::1 on 2"}
		if d := cmp.Diff(want, ipLines(r)); d != "" {
			t.Errorf("result ips (-want +got):\n%s", d)
		}
	})
	t.Run("check and del", func(t *testing.T) {
		for _, vm := range []bool{false, true} {
			h := newHarness(t, dualConf(map[string]any{"vm": vm}))
			check := h.addForCheck(a)
			if err := check(); err != nil {
				t.Fatalf("%s: CHECK after ADD: %v", modeName(vm), err)
			}
			if err := h.del(a, nil); err != nil {
				t.Fatal(err)
			}
			if _, ok := h.leaseOf(a); ok {
				t.Errorf("%s: DEL left the lease", modeName(vm))
			}
			h.wantDetached(concat(bridgeState, bridgeState6))
		}
	})
	t.Run("check names a lost IPv6 address", func(t *testing.T) {
		h := newHarness(t, dualConf(nil))
		check := h.addForCheck(a)
		l := h.dp.links[fakeLinkKey{a.netns, "eth0"}]
		l.addrs = slices.DeleteFunc(l.addrs, func(p netip.Prefix) bool { return p.Addr().Is6() })
		err := check()
		if err == nil || !strings.Contains(err.Error(), "eth0 does not have address fd00:10:244:3::2/64") {
			t.Errorf("CHECK = %v, want it to name the missing IPv6 address", err)
		}
	})
	t.Run("check refuses an IPv4-only result", func(t *testing.T) {
		h4 := newHarness(t, nil)
		prev := h4.mustAddPrev(a)
		h := newHarness(t, dualConf(nil))
		h.mustAdd(a, nil)
		err := h.other("CHECK", h.p.Check, a, map[string]any{"prevResult": prev})
		wantCode(t, err, types.ErrInvalidNetworkConfig, "want 3 interfaces and 2 IPs")
	})
}

// TestPluginAddDualStackEveryVersion: every CNI version's result carries
// both addresses; 0.3.x and 0.4.0 name each one's "version".
func TestPluginAddDualStackEveryVersion(t *testing.T) {
	for _, v := range specVersions {
		t.Run(v, func(t *testing.T) {
			h := newHarness(t, dualConf(map[string]any{"cniVersion": v}))
			out, err := h.add(att("a"), nil)
			if err != nil {
				t.Fatal(err)
			}
			var raw struct {
				IPs []struct {
					Version string `json:"version"`
					Address string `json:"address"`
				} `json:"ips"`
			}
			if err := json.Unmarshal([]byte(out), &raw); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ip := range raw.IPs {
				got = append(got, ip.Version+" "+ip.Address)
			}
			want := []string{" 10.244.3.2/24", " fd00:10:244:3::2/64"}
			if strings.HasPrefix(v, "0.") {
				want = []string{"4 10.244.3.2/24", "6 fd00:10:244:3::2/64"}
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("result ips (-want +got):\n%s", d)
			}
		})
	}
}

func TestParseConfigDualStack(t *testing.T) {
	for _, tc := range []struct {
		name       string
		set        map[string]any
		field, val string
	}{
		{"subnet6 is IPv4", map[string]any{"subnet6": "10.9.0.0/24"}, "subnet6", "10.9.0.0/24"},
		{"subnet6 host bits", map[string]any{"subnet6": "fd00::1/64"}, "subnet6", "fd00::1/64"},
		{"subnet6 larger than /64", map[string]any{"subnet6": "fd00::/56"}, "subnet6", "fd00::/56"},
		{"subnet6 smaller than /120", map[string]any{"subnet6": "fd00::/124"}, "subnet6", "fd00::/124"},
		{"subnet6 not a CIDR", map[string]any{"subnet6": "fd00::"}, "subnet6", "fd00::"},
		{"gateway6 without subnet6", map[string]any{"gateway6": "fd00::1"}, "gateway6", "fd00::1"},
		{"gateway6 outside", map[string]any{"subnet6": "fd00::/64", "gateway6": "fd01::1"}, "gateway6", "fd01::1"},
		{"gateway6 is the anycast address", map[string]any{"subnet6": "fd00::/64", "gateway6": "fd00::"}, "gateway6", "fd00::"},
		{"ips outside subnet6", map[string]any{"subnet6": "fd00::/64", "runtimeConfig": map[string]any{"ips": []string{"fd01::5"}}}, "runtimeConfig.ips", "fd01::5"},
		{"ips is the gateway6", map[string]any{"subnet6": "fd00::/64", "runtimeConfig": map[string]any{"ips": []string{"fd00::1"}}}, "runtimeConfig.ips", "fd00::1"},
		{"two IPv6 ips", map[string]any{"subnet6": "fd00::/64", "runtimeConfig": map[string]any{"ips": []string{"fd00::5", "fd00::6"}}}, "runtimeConfig.ips", "fd00::6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := map[string]any{"cniVersion": "1.0.0", "name": "vmlane", "type": "vmlane", "subnet": "10.244.3.0/24"}
			for k, v := range tc.set {
				conf[k] = v
			}
			data, _ := json.Marshal(conf)
			_, err := ParseConfig(data, nil)
			wantCode(t, err, types.ErrInvalidNetworkConfig, "invalid "+tc.field+" \""+tc.val+"\"")
		})
	}
	// Without subnet6 an IPv6 request is another plugin's, as before.
	data, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "vmlane", "type": "vmlane", "subnet": "10.244.3.0/24",
		"runtimeConfig": map[string]any{"ips": []string{"fd00::5"}}})
	if c, err := ParseConfig(data, nil); err != nil || c.IP6.IsValid() || c.DualStack() {
		t.Errorf("IPv4-only config with an IPv6 request: %v, %+v", err, c)
	}
}

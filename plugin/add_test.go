package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/google/go-cmp/cmp"
	"github.com/vmlane/vmlane/leases"
)

func TestPluginAdd(t *testing.T) {
	a := att("a")
	a.args = k8sArgs
	t.Run("plain", func(t *testing.T) {
		h := newHarness(t, nil)
		r := h.mustAdd(a, nil)
		h.wantState(concat(bridgeState, plainState("a", "10.244.3.2")))
		h.wantLeases("10.244.3.2 mac=02:76:0a:f4:03:02 reserved cni attachment=a/eth0 netns=/run/netns/a pod=default/web-0 uid=uid-a hostname=web-0")
		want := []string{"vmlane0 02:76:00:00:00:01 ", a.veth() + " " + fakeMAC("", a.veth()) + " ", "eth0 02:76:0a:f4:03:02 /run/netns/a"}
		if diff := cmp.Diff(want, ifaceLines(r)); diff != "" {
			t.Errorf("result interfaces (-want +got):\n%s", diff)
		}
		if got := ipLines(r); !slices.Equal(got, []string{"10.244.3.2/24 gw 10.244.3.1 on 2"}) {
			t.Errorf("result ips %q", got)
		}
	})
	t.Run("vm", func(t *testing.T) {
		h := newHarness(t, map[string]any{"vm": true})
		r := h.mustAdd(a, nil)
		h.wantState(concat(bridgeState, vmState("a", "10.244.3.2", "02:76:0a:f4:03:02")))
		h.wantLeases("10.244.3.2 mac=02:76:0a:f4:03:02 reserved cni attachment=a/eth0 netns=/run/netns/a pod=default/web-0 uid=uid-a hostname=web-0")
		want := []string{
			"vmlane0 02:76:00:00:00:01 ",
			a.veth() + " " + fakeMAC("", a.veth()) + " ",
			"eth0 " + fakeMAC("/run/netns/a", "eth0") + " /run/netns/a",
			"tap0 02:76:0a:f4:03:02 /run/netns/a",
		}
		if diff := cmp.Diff(want, ifaceLines(r)); diff != "" {
			t.Errorf("result interfaces (-want +got):\n%s", diff)
		}
		if got := ipLines(r); !slices.Equal(got, []string{"10.244.3.2/24 gw 10.244.3.1 on 2"}) { // on eth0, where runtimes read the pod IP
			t.Errorf("result ips %q", got)
		}
	})
	t.Run("multi-queue TAP", func(t *testing.T) {
		h := newHarness(t, map[string]any{"vm": true, "tapMultiQueue": true, "tapName": "vmtap", "mtu": 9000, "bridge": "br-vm"})
		h.mustAdd(att("a"), nil)
		if !slices.Contains(h.dp.state(), "ip -n /run/netns/a tuntap add vmtap mode tap vnet_hdr multi_queue") {
			t.Errorf("no multi-queue TAP named vmtap:\n%s", strings.Join(h.dp.state(), "\n"))
		}
		if !slices.Contains(h.dp.state(), "ip link set br-vm address 02:76:00:00:00:01 mtu 9000 up") {
			t.Errorf("bridge br-vm not at mtu 9000:\n%s", strings.Join(h.dp.state(), "\n"))
		}
	})
}

func ifaceLines(r *current.Result) []string {
	var out []string
	for _, i := range r.Interfaces {
		out = append(out, i.Name+" "+i.Mac+" "+i.Sandbox)
	}
	return out
}

func ipLines(r *current.Result) []string {
	var out []string
	for _, ip := range r.IPs {
		s := ip.Address.String() + " gw " + ip.Gateway.String()
		if ip.Interface != nil {
			s += fmt.Sprintf(" on %d", *ip.Interface)
		}
		out = append(out, s)
	}
	return out
}

// TestPluginAddEveryVersion: ADD prints nothing but a result of the
// config's version.
func TestPluginAddEveryVersion(t *testing.T) {
	for _, v := range specVersions {
		for _, vm := range []bool{false, true} {
			t.Run(modeName(vm)+"-"+v, func(t *testing.T) {
				h := newHarness(t, map[string]any{"cniVersion": v, "vm": vm})
				out, err := h.add(att("a"), nil)
				if err != nil {
					t.Fatal(err)
				}
				r := parseResult(t, out)
				var ver struct {
					CNIVersion string `json:"cniVersion"`
				}
				if err := json.Unmarshal([]byte(out), &ver); err != nil || ver.CNIVersion != v {
					t.Errorf("stdout cniVersion %q (%v), want %q", ver.CNIVersion, err, v)
				}
				if len(r.IPs) != 1 || r.IPs[0].Address.IP.String() != "10.244.3.2" {
					t.Errorf("result IPs %q", ipLines(r))
				}
			})
		}
	}
}

// TestPluginAddUndo fails every step of ADD that can fail, before and
// after the step did its work, and checks ADD leaves the node as it found
// it: no link, no lease for the attachment. Another attachment is in place
// first, so the bridge exists and must stay.
func TestPluginAddUndo(t *testing.T) {
	tests := []struct {
		step    string
		vm      bool
		partial bool
	}{
		{step: "EnsureBridge"},
		{step: "EnsureBridge", partial: true},
		{step: "EnableForwarding"},
		{step: "SetupVeth"},
		{step: "SetupVeth", vm: true},
		{step: "SetupVeth", partial: true},
		{step: "SetupVeth", vm: true, partial: true},
		{step: "ConfigureAddress"},
		{step: "ConfigureAddress", partial: true},
		{step: "SetupTap", vm: true},
		{step: "SetupTap", vm: true, partial: true},
		{step: "DeleteHostLink"}, // removing a stale veth
		{step: "Guard"},
		{step: "Guard", partial: true},
		{step: "Guard", vm: true, partial: true},
	}
	for _, tc := range tests {
		name := modeName(tc.vm) + "/" + tc.step
		if tc.partial {
			name += "/after-effect"
		}
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, map[string]any{"vm": tc.vm})
			h.mustAdd(att("other"), nil)
			state, leaseLines := h.dp.state(), h.leaseLines()

			h.dp.failNth(tc.step, 1, tc.partial)
			b := att("b")
			out, err := h.add(b, nil)
			if err == nil {
				t.Fatalf("ADD succeeded with %s failing", tc.step)
			}
			if !errors.Is(err, errInjected) {
				t.Errorf("error %v does not wrap the dataplane's", err)
			}
			if out != "" {
				t.Errorf("failed ADD printed %q", out)
			}
			h.wantState(state)
			if diff := cmp.Diff(leaseLines, h.leaseLines()); diff != "" {
				t.Errorf("leases (-before +after):\n%s", diff)
			}
			if _, ok := h.leaseOf(b); ok {
				t.Errorf("failed ADD left a lease")
			}
			if got := h.dp.linkNames(b.netns); len(got) != 0 {
				t.Errorf("failed ADD left links in the pod: %q", got)
			}

			// The attachment can be made once the fault is gone.
			h.mustAdd(b, nil)
			if _, ok := h.leaseOf(b); !ok {
				t.Errorf("no lease after the second ADD")
			}
		})
	}
}

// TestPluginAddUndoFreshNode: a failing first ADD on a node may leave the
// bridge (shared by every pod) but nothing of the attachment.
func TestPluginAddUndoFreshNode(t *testing.T) {
	for _, step := range []string{"EnsureBridge", "EnableForwarding", "Guard", "SetupVeth", "ConfigureAddress", "SetupTap"} {
		for _, partial := range []bool{false, true} {
			vm := step == "SetupTap"
			t.Run(fmt.Sprintf("%s/partial=%v", step, partial), func(t *testing.T) {
				h := newHarness(t, map[string]any{"vm": vm})
				h.dp.failNth(step, 1, partial)
				if _, err := h.add(att("a"), nil); err == nil {
					t.Fatalf("ADD succeeded with %s failing", step)
				}
				for _, l := range h.dp.linkNames("") {
					if l != "vmlane0" {
						t.Errorf("host netns keeps %s", l)
					}
				}
				if got := h.dp.linkNames("/run/netns/a"); len(got) != 0 {
					t.Errorf("pod netns keeps %q", got)
				}
				h.wantLeases()
			})
		}
	}
}

func TestPluginAddRetried(t *testing.T) {
	for _, vm := range []bool{false, true} {
		t.Run(modeName(vm), func(t *testing.T) {
			h := newHarness(t, map[string]any{"vm": vm})
			h.mustAdd(att("other"), nil)
			a := att("a")
			first := h.mustAdd(a, nil)
			state, leaseLines := h.dp.state(), h.leaseLines()
			second := h.mustAdd(a, nil)
			if diff := cmp.Diff(ipLines(first), ipLines(second)); diff != "" {
				t.Errorf("retried ADD gave another address (-first +retry):\n%s", diff)
			}
			h.wantState(state)
			if diff := cmp.Diff(leaseLines, h.leaseLines()); diff != "" {
				t.Errorf("leases (-first +retry):\n%s", diff)
			}
			if n := strings.Count(strings.Join(h.dp.linkNames(""), " "), a.veth()); n != 1 {
				t.Errorf("%d host veths for the attachment, want 1", n)
			}
		})
	}
}

// TestPluginAddAfterInterruptedAdd: an ADD killed halfway (no defer ran)
// leaves its lease, veth and TAP; the runtime's retry replaces them and
// ends where one clean ADD would.
func TestPluginAddAfterInterruptedAdd(t *testing.T) {
	for _, vm := range []bool{false, true} {
		t.Run(modeName(vm), func(t *testing.T) {
			h := newHarness(t, map[string]any{"vm": vm})
			a := att("a")
			// What the killed ADD did, a TAP with other flags included.
			h.dp.addNetns(a.netns)
			s, err := leases.Open(h.leaseFile, netip.MustParsePrefix("10.244.3.0/24"), netip.MustParseAddr("10.244.3.1"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Reserve(leases.ReserveRequest{Key: a.key(), MACFor: DeriveMAC, NetNS: a.netns}); err != nil {
				t.Fatal(err)
			}
			if _, err := h.dp.EnsureBridge("vmlane0", netip.MustParsePrefix("10.244.3.1/24"), 1500, GatewayMAC); err != nil {
				t.Fatal(err)
			}
			if _, _, err := h.dp.SetupVeth(a.netns, a.ifname, a.veth(), "vmlane0", 1500, "", false, nil); err != nil {
				t.Fatal(err)
			}
			if vm {
				if _, err := h.dp.SetupTap(a.netns, TapSpec{Name: "tap0", PodIf: a.ifname, MTU: 1500, MultiQueue: true}); err != nil {
					t.Fatal(err)
				}
			}

			r := h.mustAdd(a, nil)
			want := concat(bridgeState, plainState("a", "10.244.3.2"))
			if vm {
				want = concat(bridgeState, vmState("a", "10.244.3.2", "02:76:0a:f4:03:02"))
			}
			h.wantState(want)
			h.wantLeases("10.244.3.2 mac=02:76:0a:f4:03:02 reserved cni attachment=a/eth0 netns=/run/netns/a")
			if got := r.IPs[0].Address.IP.String(); got != "10.244.3.2" {
				t.Errorf("retry got %s, the interrupted ADD reserved 10.244.3.2", got)
			}
		})
	}
}

// TestPluginAddRetriedFails: a retried ADD that fails keeps the lease the
// earlier ADD made; the runtime still owns it until DEL.
func TestPluginAddRetriedFails(t *testing.T) {
	for _, tc := range []struct {
		step string
		vm   bool
	}{
		{"DeleteHostLink", false},
		{"Guard", false},
		{"SetupVeth", false},
		{"ConfigureAddress", false},
		{"DeleteNetnsLinks", true},
		{"SetupVeth", true},
		{"SetupTap", true},
	} {
		step := tc.step
		t.Run(modeName(tc.vm)+"/"+step, func(t *testing.T) {
			h := newHarness(t, map[string]any{"vm": tc.vm})
			a := att("a")
			h.mustAdd(a, nil)
			before, _ := h.leaseOf(a)
			h.dp.failNth(step, 1, false)
			if _, err := h.add(a, nil); err == nil {
				t.Fatalf("retried ADD succeeded with %s failing", step)
			}
			after, ok := h.leaseOf(a)
			if !ok || after.IP != before.IP || after.MAC != before.MAC {
				t.Errorf("lease after the failed retry: %+v (held: %v), want %s %s", after, ok, before.IP, before.MAC)
			}
			// DEL then cleans up everything.
			if err := h.del(a, nil); err != nil {
				t.Fatal(err)
			}
			h.wantDetached(expand(bridgeState...))
			h.wantLeases()
		})
	}
}

// TestPluginAddRetriedConflict: a retry asking for another address than
// the attachment holds is refused, and the held lease stays.
func TestPluginAddRetriedConflict(t *testing.T) {
	h := newHarness(t, nil)
	a := att("a")
	h.mustAdd(a, nil)
	leaseLines := h.leaseLines()
	_, err := h.add(a, map[string]any{"runtimeConfig": map[string]any{"ips": []string{"10.244.3.50/24"}}})
	wantCode(t, err, types.ErrInvalidNetworkConfig, "10.244.3.2", "10.244.3.50")
	if diff := cmp.Diff(leaseLines, h.leaseLines()); diff != "" {
		t.Errorf("leases (-before +after):\n%s", diff)
	}
}

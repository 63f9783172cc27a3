package plugin

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/vmlane/vmlane/internal/antispoof"
)

// addForCheck runs ADD, which must succeed, and returns a CHECK of its
// result.
func (h *harness) addForCheck(a attachment) func() error {
	h.t.Helper()
	prev := h.mustAddPrev(a)
	return func() error { return h.other("CHECK", h.p.Check, a, map[string]any{"prevResult": prev}) }
}

// TestPluginCheck: CHECK accepts what ADD built, given ADD's result, and
// reports what went missing since.
func TestPluginCheck(t *testing.T) {
	for _, vm := range []bool{false, true} {
		for _, v := range []string{"0.4.0", "1.0.0", "1.1.0"} {
			t.Run(modeName(vm)+"-"+v, func(t *testing.T) {
				h := newHarness(t, map[string]any{"vm": vm, "cniVersion": v})
				a := att("a")
				check := h.addForCheck(a)
				if err := check(); err != nil {
					t.Fatalf("CHECK after ADD: %v", err)
				}
				if vm {
					h.dp.deleteLink(a.netns, "tap0")
				} else {
					h.dp.setUp("", a.veth(), false)
				}
				if err := check(); err == nil {
					t.Error("CHECK passed on a broken attachment")
				}
				if err := h.del(a, nil); err != nil {
					t.Fatal(err)
				}
				if err := check(); err == nil {
					t.Error("CHECK passed after DEL")
				}
			})
		}
	}
}

func TestPluginAntiSpoof(t *testing.T) {
	t.Run("off", func(t *testing.T) {
		h := newHarness(t, map[string]any{"antiSpoof": false})
		a := att("a")
		check := h.addForCheck(a)
		want := plainState("a", "10.244.3.2")[1:] // no guard line
		h.wantState(concat(bridgeState, want))
		if l, _ := h.leaseOf(a); l.BridgePort != "" {
			t.Errorf("lease names bridge port %q with anti-spoofing off", l.BridgePort)
		}
		if err := check(); err != nil {
			t.Errorf("CHECK with anti-spoofing off: %v", err)
		}
		if err := h.del(a, nil); err != nil {
			t.Fatal(err)
		}
		for _, c := range h.dp.callLog() {
			if strings.Contains(c, "uard") {
				t.Errorf("anti-spoofing off, yet the plugin called %s", c)
			}
		}
	})
	t.Run("check", func(t *testing.T) {
		h := newHarness(t, map[string]any{"vm": true})
		a := att("a")
		check := h.addForCheck(a)
		if err := check(); err != nil {
			t.Fatalf("CHECK after ADD: %v", err)
		}
		if l, _ := h.leaseOf(a); l.BridgePort != a.veth() {
			t.Errorf("lease names bridge port %q, want %s", l.BridgePort, a.veth())
		}
		mac, _ := net.ParseMAC("02:76:0a:f4:03:09")
		for name, change := range map[string]func() error{
			"removed": func() error { return h.dp.Unguard(a.veth()) },
			"other address": func() error {
				return h.dp.Guard(antispoof.Port{Name: a.veth(), MAC: mac, IP: netip.MustParseAddr("10.244.3.9")})
			},
		} {
			if err := change(); err != nil {
				t.Fatal(err)
			}
			if err := check(); err == nil || !strings.Contains(err.Error(), "anti-spoofing") {
				t.Errorf("CHECK with the port's anti-spoofing %s = %v, want it named", name, err)
			}
		}
		if err := h.del(a, nil); err != nil {
			t.Fatal(err)
		}
		h.wantDetached(expand(bridgeState...))
	})
	t.Run("DEL leaves the entry, GC sweeps it", func(t *testing.T) {
		h := newHarness(t, nil)
		a, b := att("a"), att("b")
		h.mustAdd(a, nil)
		h.mustAdd(b, nil)
		if err := h.del(a, nil); err != nil {
			t.Fatal(err)
		}
		h.wantState(concat(bridgeState, []string{guardState("a", "02:76:0a:f4:03:02", "10.244.3.2")}, plainState("b", "10.244.3.3")))
		if err := h.other("GC", h.p.GC, attachment{}, gcConf(b)); err != nil {
			t.Fatal(err)
		}
		h.wantState(concat(bridgeState, plainState("b", "10.244.3.3")))
	})
	t.Run("no kernel support", func(t *testing.T) {
		h := newHarness(t, nil)
		h.dp.guardErr = antispoof.ErrNoKernelSupport
		_, err := h.add(att("a"), nil)
		wantCode(t, err, types.ErrInvalidNetworkConfig, "antiSpoof", "nftables", `"antiSpoof": false`)
		h.wantState(expand(bridgeState...))
		h.wantLeases()
	})
	t.Run("not a bool", func(t *testing.T) {
		h := newHarness(t, map[string]any{"antiSpoof": "yes"})
		_, err := h.add(att("a"), nil)
		wantCode(t, err, types.ErrDecodingFailure, "antiSpoof")
	})
}

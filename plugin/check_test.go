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
// names what changed since: each damage is made behind the plugin's back
// in the fake, and CHECK's error must name the link and what is wrong.
func TestPluginCheck(t *testing.T) {
	a := att("a")
	damages := []struct {
		name   string
		vm     bool
		damage func(f *fakeDataplane)
		want   string
	}{
		{"host veth down", false, func(f *fakeDataplane) { f.setUp("", a.veth(), false) }, "host veth " + a.veth() + " is down"},
		{"host veth off the bridge", true, func(f *fakeDataplane) { f.setMaster("", a.veth(), "") }, "host veth " + a.veth() + " is not on bridge vmlane0"},
		{"host veth's MAC", false, func(f *fakeDataplane) { f.setMAC("", a.veth(), "02:00:00:00:00:01") }, "host veth " + a.veth() + " has MAC 02:00:00:00:00:01, the result says "},
		{"pod veth down and up", false, func(f *fakeDataplane) {
			f.setUp(a.netns, "eth0", false)
			f.setUp(a.netns, "eth0", true)
		}, "eth0 has no route 0.0.0.0/0 via 10.244.3.1"},
		{"pod veth down", true, func(f *fakeDataplane) { f.setUp(a.netns, "eth0", false) }, "pod veth eth0 is down"},
		{"pod veth's MAC", false, func(f *fakeDataplane) { f.setMAC(a.netns, "eth0", "02:00:00:00:00:02") }, "pod veth eth0 has MAC 02:00:00:00:00:02, the result says 02:76:0a:f4:03:02"},
		{"pod veth's MTU", false, func(f *fakeDataplane) { f.setMTU(a.netns, "eth0", 1400) }, "pod veth eth0 has MTU 1400, the result says 1500"},
		{"pod veth gone", false, func(f *fakeDataplane) { f.deleteLink(a.netns, "eth0") }, "pod veth eth0: Link not found"},
		{"TAP gone", true, func(f *fakeDataplane) { f.deleteLink(a.netns, "tap0") }, "TAP tap0: Link not found"},
		{"TAP down", true, func(f *fakeDataplane) { f.setUp(a.netns, "tap0", false) }, "TAP tap0 is down"},
		{"TAP's MTU", true, func(f *fakeDataplane) { f.setMTU(a.netns, "tap0", 9000) }, "TAP tap0 has MTU 9000, the result says 1500"},
		{"netns gone", true, func(f *fakeDataplane) { f.removeNetns(a.netns) }, "/run/netns/a"},
	}
	for _, d := range damages {
		t.Run(modeName(d.vm)+"/"+d.name, func(t *testing.T) {
			h := newHarness(t, map[string]any{"vm": d.vm, "cniVersion": "1.1.0"})
			check := h.addForCheck(a)
			if err := check(); err != nil {
				t.Fatalf("CHECK after ADD: %v", err)
			}
			d.damage(h.dp)
			if err := check(); err == nil || !strings.Contains(err.Error(), d.want) {
				t.Errorf("CHECK = %v, want it to say %q", err, d.want)
			}
		})
	}
	for _, vm := range []bool{false, true} {
		for _, v := range []string{"0.4.0", "1.0.0", "1.1.0"} {
			t.Run(modeName(vm)+"-"+v, func(t *testing.T) {
				h := newHarness(t, map[string]any{"vm": vm, "cniVersion": v})
				check := h.addForCheck(a)
				if err := check(); err != nil {
					t.Fatalf("CHECK after ADD: %v", err)
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
		want := plainState("a", "10.244.3.2")[2:] // no guard line, no ingress chain
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
			"removed": func() error { return h.dp.Unguard("vmlane", a.veth()) },
			"other address": func() error {
				return h.dp.Guard("vmlane", antispoof.Port{Name: a.veth(), MAC: mac, IP: netip.MustParseAddr("10.244.3.9")}, nil)
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

// TestCompareRedirects: a VM pod's TAP and veth must each redirect to the
// other and nowhere else; a second filter, to a link that is gone, drops
// the frames the right one would pass.
func TestCompareRedirects(t *testing.T) {
	want := Expected{Attached: Attached{
		Bridge: Link{Name: "br"}, HostVeth: Link{Name: "vh"}, PodVeth: Link{Name: "eth0"}, Tap: &Link{Name: "tap0"},
	}}
	for _, tc := range []struct {
		tap, pod []string
		want     string
	}{
		{[]string{"eth0"}, []string{"tap0"}, ""},
		{[]string{"", "eth0"}, []string{"tap0"}, `tap0 redirects to ["" "eth0"], want eth0 alone`},
		{[]string{"eth0"}, nil, "no redirect from eth0 to tap0"},
		{[]string{""}, []string{"tap0"}, "no redirect from tap0 to eth0"},
	} {
		o := Observed{
			HostVeth: &LinkState{Name: "vh", Kind: "veth", Master: "br", Up: true},
			PodVeth:  &LinkState{Name: "eth0", Kind: "veth", Up: true, Redirects: tc.pod},
			Tap:      &LinkState{Name: "tap0", Kind: "tuntap", Up: true, Redirects: tc.tap},
		}
		err := compareAttachment(o, want)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("TAP redirects %q, veth %q: %v, want %q", tc.tap, tc.pod, err, tc.want)
		}
	}
}

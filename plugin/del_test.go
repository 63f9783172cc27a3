package plugin

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/google/go-cmp/cmp"
	"github.com/vmlane/vmlane/leases"
)

func TestPluginDel(t *testing.T) {
	for _, vm := range []bool{false, true} {
		t.Run(modeName(vm)+"/twice", func(t *testing.T) {
			h := newHarness(t, map[string]any{"vm": vm})
			h.mustAdd(att("other"), nil)
			want, wantLeases := h.dp.state(), h.leaseLines()
			a := att("a")
			h.mustAdd(a, nil)
			for i := range 2 {
				if err := h.del(a, nil); err != nil {
					t.Fatalf("DEL #%d: %v", i+1, err)
				}
				h.wantDetached(want)
				if diff := cmp.Diff(wantLeases, h.leaseLines()); diff != "" {
					t.Errorf("leases after DEL #%d (-want +got):\n%s", i+1, diff)
				}
			}
		})
		t.Run(modeName(vm)+"/netns gone", func(t *testing.T) {
			h := newHarness(t, map[string]any{"vm": vm})
			a := att("a")
			h.mustAdd(a, nil)
			h.dp.removeNetns(a.netns)
			if err := h.del(a, nil); err != nil {
				t.Fatal(err)
			}
			h.wantDetached(expand(bridgeState...))
			h.wantLeases()
		})
		t.Run(modeName(vm)+"/netns gone, host veth left", func(t *testing.T) {
			// The pod end vanished some other way; the host end lingers.
			h := newHarness(t, map[string]any{"vm": vm})
			a := att("a")
			h.mustAdd(a, nil)
			h.dp.mu.Lock()
			delete(h.dp.netns, a.netns)
			for k := range h.dp.links {
				if k.netns == a.netns {
					delete(h.dp.links, k)
				}
			}
			h.dp.mu.Unlock()
			if err := h.del(a, nil); err != nil {
				t.Fatal(err)
			}
			h.wantDetached(expand(bridgeState...))
			h.wantLeases()
		})
		t.Run(modeName(vm)+"/no CNI_NETNS", func(t *testing.T) {
			h := newHarness(t, map[string]any{"vm": vm})
			a := att("a")
			h.mustAdd(a, nil)
			a.netns = ""
			if err := h.del(a, nil); err != nil {
				t.Fatal(err)
			}
			if h.dp.hasLink("", a.veth()) {
				t.Errorf("host veth %s left", a.veth())
			}
			h.wantLeases()
		})
	}
	t.Run("never added", func(t *testing.T) {
		h := newHarness(t, nil)
		a := att("a")
		h.dp.addNetns(a.netns)
		if err := h.del(a, nil); err != nil {
			t.Fatal(err)
		}
		h.wantLeases()
	})
	t.Run("never added, netns gone", func(t *testing.T) {
		h := newHarness(t, nil)
		if err := h.del(att("a"), nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("link deletion fails: lease kept", func(t *testing.T) {
		// Links first, then the lease: the address must not be reused
		// while an interface may still answer for it.
		h := newHarness(t, nil)
		a := att("a")
		h.mustAdd(a, nil)
		h.dp.failNth("DeleteHostLink", 1, false)
		if err := h.del(a, nil); err == nil {
			t.Fatal("DEL succeeded though the veth could not be deleted")
		}
		if _, ok := h.leaseOf(a); !ok {
			t.Error("DEL released the lease of a veth it could not delete")
		}
		if err := h.del(a, nil); err != nil {
			t.Fatal(err)
		}
		h.wantLeases()
	})
	t.Run("podCIDR changed under the pod", func(t *testing.T) {
		// vmlaned rewrote the conflist for the node's new podCIDR; the
		// pod's DEL comes with it, and the lease file still holds the
		// old subnet's leases. Found by containerd: the pod stayed
		// Terminating until the lease file was changed by hand.
		h := newHarness(t, nil)
		a, b := att("a"), att("b")
		h.mustAdd(a, nil)
		h.mustAdd(b, nil)
		moved := map[string]any{"subnet": "10.244.9.0/24"}
		if err := h.del(a, moved); err != nil {
			t.Fatalf("DEL after a podCIDR change: %v", err)
		}
		if h.dp.hasLink("", a.veth()) {
			t.Errorf("host veth %s left", a.veth())
		}
		h.wantLeases("10.244.3.3 mac=02:76:0a:f4:03:03 reserved cni attachment=b/eth0 netns=/run/netns/b")
		if err := h.del(b, moved); err != nil {
			t.Fatalf("DEL of the last old pod: %v", err)
		}
		h.wantLeases()
		// With the old subnet's leases gone, the new subnet is adopted.
		if r := h.mustAdd(att("c"), moved); r.IPs[0].Address.IP.String() != "10.244.9.2" {
			t.Errorf("ADD in the new subnet got %s, want 10.244.9.2", r.IPs[0].Address.IP)
		}
	})
	t.Run("lease file unreadable", func(t *testing.T) {
		// The links go and DEL succeeds; the file is left as it is for
		// the operator, who may still recover its leases.
		h := newHarness(t, nil)
		a := att("a")
		h.mustAdd(a, nil)
		junk := []byte("{not a lease file")
		if err := os.WriteFile(h.leaseFile, junk, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := h.del(a, nil); err != nil {
			t.Fatalf("DEL with an unreadable lease file: %v", err)
		}
		if h.dp.hasLink("", a.veth()) {
			t.Errorf("host veth %s left", a.veth())
		}
		if got, _ := os.ReadFile(h.leaseFile); !bytes.Equal(got, junk) {
			t.Errorf("DEL wrote over the unreadable lease file: %q", got)
		}
		if !strings.Contains(h.stderr.String(), "lease file unreadable") {
			t.Errorf("DEL did not log the unreadable file; log:\n%s", h.stderr.String())
		}
	})
	t.Run("bad config", func(t *testing.T) {
		h := newHarness(t, nil)
		err := h.del(att("a"), map[string]any{"mtu": 1})
		wantCode(t, err, types.ErrInvalidNetworkConfig, "mtu")
	})
}

// TestPluginDelKeepsOthers: DEL of one attachment leaves the others'
// links and leases alone, including another interface of the same
// container.
func TestPluginDelKeepsOthers(t *testing.T) {
	h := newHarness(t, nil)
	a, b, a2 := att("a"), att("b"), att("a")
	a2.ifname = "net1"
	h.mustAdd(b, nil)
	h.mustAdd(a2, nil)
	want, wantLeases := h.dp.state(), h.leaseLines()
	h.mustAdd(a, nil)
	if err := h.del(a, nil); err != nil {
		t.Fatal(err)
	}
	h.wantDetached(want)
	if diff := cmp.Diff(wantLeases, h.leaseLines()); diff != "" {
		t.Errorf("leases (-want +got):\n%s", diff)
	}
}

func gcConf(valid ...attachment) map[string]any {
	list := []map[string]string{}
	for _, a := range valid {
		list = append(list, map[string]string{"containerID": a.id, "ifname": a.ifname})
	}
	return map[string]any{"cni.dev/valid-attachments": list}
}

func TestPluginGC(t *testing.T) {
	h := newHarness(t, map[string]any{"vm": true})
	a, b, c := att("a"), att("b"), att("c")
	h.mustAdd(a, nil)
	h.mustAdd(b, nil)
	h.mustAdd(c, nil)
	// A VM the DHCP server leased to on its own: GC leaves it to expiry.
	s, err := leases.Open(h.leaseFile, netip.MustParsePrefix("10.244.3.0/24"), netip.MustParseAddr("10.244.3.1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve(leases.ReserveRequest{MAC: "02:00:00:00:00:99", IP: netip.MustParseAddr("10.244.3.99")}); err != nil {
		t.Fatal(err)
	}
	// The pods of a and c are gone; their netns went, their host veths
	// with them in the kernel, but leave one behind to see GC remove it.
	h.dp.removeNetns(a.netns)
	h.dp.mu.Lock()
	delete(h.dp.netns, c.netns)
	for k := range h.dp.links {
		if k.netns == c.netns {
			delete(h.dp.links, k)
		}
	}
	h.dp.mu.Unlock()
	if !h.dp.hasLink("", c.veth()) {
		t.Fatal("setup: c's host veth should linger")
	}

	calls := len(h.dp.callLog())
	if err := h.other("GC", h.p.GC, attachment{}, gcConf(b)); err != nil {
		t.Fatal(err)
	}
	h.wantState(concat(bridgeState, vmState("b", "10.244.3.3", "02:76:0a:f4:03:03")))
	h.wantLeases(
		"10.244.3.3 mac=02:76:0a:f4:03:03 reserved cni attachment=b/eth0 netns=/run/netns/b",
		"10.244.3.99 mac=02:00:00:00:00:99 reserved dhcp",
	)
	wantCalls := []string{"DeleteHostLink(" + a.veth() + ")", "DeleteHostLink(" + c.veth() + ")", "Guarded()", "Unguard(" + a.veth() + ", " + c.veth() + ")"}
	slices.Sort(wantCalls)
	if diff := cmp.Diff(wantCalls, slices.Sorted(slices.Values(h.dp.callLog()[calls:]))); diff != "" {
		t.Errorf("GC's dataplane calls (-want +got):\n%s", diff)
	}

	// Again: nothing left to do.
	if err := h.other("GC", h.p.GC, attachment{}, gcConf(b)); err != nil {
		t.Fatal(err)
	}
	// No valid attachment at all: everything of CNI goes. (b's TAP stays
	// in b's netns: GC removes host veths only, and a pod the runtime has
	// forgotten has lost its netns too.)
	if err := h.other("GC", h.p.GC, attachment{}, nil); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"vmlane0"}, h.dp.linkNames("")); diff != "" {
		t.Errorf("host links (-want +got):\n%s", diff)
	}
	h.wantLeases("10.244.3.99 mac=02:00:00:00:00:99 reserved dhcp")
}

// TestPluginGCLinkFailure: GC, like DEL, must not free an address whose
// veth it could not delete.
func TestPluginGCLinkFailure(t *testing.T) {
	h := newHarness(t, nil)
	a, b := att("a"), att("b")
	h.mustAdd(a, nil)
	h.mustAdd(b, nil)
	h.dp.failNth("DeleteHostLink", 1, false) // a's
	if err := h.other("GC", h.p.GC, attachment{}, gcConf()); err == nil {
		t.Error("GC reported success though a veth could not be deleted")
	}
	if _, ok := h.leaseOf(a); !ok {
		t.Error("GC released a's lease though it could not delete a's veth")
	}
	if _, ok := h.leaseOf(b); ok {
		t.Error("GC kept b's lease")
	}
}

func TestPluginStatus(t *testing.T) {
	status := func(h *harness, extra map[string]any) error {
		return h.other("STATUS", h.p.Status, attachment{}, extra)
	}
	t.Run("ok", func(t *testing.T) {
		h := newHarness(t, nil)
		h.mustAdd(att("a"), nil)
		if err := status(h, nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("bridge missing", func(t *testing.T) {
		h := newHarness(t, nil)
		wantCode(t, status(h, nil), errPluginNotAvailable, "vmlane0")
	})
	t.Run("bridge down", func(t *testing.T) {
		h := newHarness(t, nil)
		h.mustAdd(att("a"), nil)
		h.dp.setUp("", "vmlane0", false)
		wantCode(t, status(h, nil), errPluginNotAvailable, "vmlane0", "down")
	})
	t.Run("bridge name taken", func(t *testing.T) {
		h := newHarness(t, map[string]any{"bridge": "eth0"})
		h.dp.addForeignLink("eth0", "device")
		wantCode(t, status(h, nil), errPluginNotAvailable, "eth0")
	})
	t.Run("subnet full", func(t *testing.T) {
		h := newHarness(t, map[string]any{"subnet": "10.244.3.0/30"})
		h.mustAdd(att("a"), nil)
		wantCode(t, status(h, nil), errPluginNotAvailable, "10.244.3.0/30", "full")
	})
	t.Run("subnet6 full", func(t *testing.T) {
		// A /120 has 254 usable IPv6 addresses, a /22 over a thousand
		// IPv4 ones: IPv6 runs out first.
		h := newHarness(t, map[string]any{"subnet": "10.244.0.0/22", "subnet6": "fd00::/120"})
		for i := range 254 {
			h.mustAdd(att(fmt.Sprintf("p%d", i)), nil)
		}
		wantCode(t, status(h, nil), errPluginNotAvailable, "subnet6 fd00::/120", "full")
		_, err := h.add(att("one-too-many"), nil)
		wantCode(t, err, types.ErrTryAgainLater, "subnet6 fd00::/120 is full")
	})
	t.Run("rest excluded", func(t *testing.T) {
		h := newHarness(t, map[string]any{"subnet": "10.244.3.0/29", "excludeRange": "10.244.3.3-10.244.3.6"})
		h.mustAdd(att("a"), nil)
		wantCode(t, status(h, nil), errPluginNotAvailable, "10.244.3.0/29", "full")
	})
	t.Run("corrupt lease file", func(t *testing.T) {
		h := newHarness(t, nil)
		h.mustAdd(att("a"), nil)
		if err := os.WriteFile(h.leaseFile, []byte(`{"version":1,"subnet":"10.244.3.0/24","leases":[{"ip":"10.244.3.2","mac":"x"`), 0o644); err != nil {
			t.Fatal(err)
		}
		wantCode(t, status(h, nil), errPluginNotAvailable)
	})
	t.Run("lease file of another subnet", func(t *testing.T) {
		h := newHarness(t, nil)
		h.mustAdd(att("a"), nil)
		wantCode(t, status(h, map[string]any{"subnet": "10.244.9.0/24"}), errPluginNotAvailable)
	})
}

// TestPluginGCUnmapsPorts: with the conflist's portMap (portmap chained
// after vmlane for hostPort), GC has portmap remove the hostPort mappings
// of each attachment it releases: portmap has no GC of its own, and a pod
// whose DEL never came would keep its host ports for ever.
func TestPluginGCUnmapsPorts(t *testing.T) {
	h := newHarness(t, map[string]any{"portMap": true})
	a, b := att("a"), att("b")
	h.mustAdd(a, nil)
	h.mustAdd(b, nil)
	if err := h.other("GC", h.p.GC, attachment{}, gcConf(b)); err != nil {
		t.Fatal(err)
	}
	h.dp.mu.Lock()
	got := slices.Clone(h.dp.unmapped)
	h.dp.mu.Unlock()
	if want := []string{"vmlane " + a.id + "/" + a.ifname}; !slices.Equal(got, want) {
		t.Errorf("Unmap calls %q, want %q", got, want)
	}
	// Without portMap, GC asks portmap for nothing.
	h2 := newHarness(t, nil)
	h2.mustAdd(a, nil)
	if err := h2.other("GC", h2.p.GC, attachment{}, gcConf()); err != nil {
		t.Fatal(err)
	}
	if len(h2.dp.unmapped) != 0 {
		t.Errorf("Unmap without portMap: %q", h2.dp.unmapped)
	}
}

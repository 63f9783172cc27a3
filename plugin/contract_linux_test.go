package plugin

import (
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/vishvananda/netlink"

	"github.com/vmlane/vmlane/internal/antispoof"
	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/privtest"
)

// world is a dataplane and the one change the plugin tests make behind
// its back that the kernel can be asked to make too: a link's admin
// state.
type world interface {
	dataplane
	setLinkUp(netns, name string, up bool) error
}

type kernelWorld struct{ netlinkDataplane }

func (kernelWorld) setLinkUp(netns, name string, up bool) error {
	return ns.WithNetNSPath(netns, func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName(name)
		if err != nil {
			return err
		}
		if up {
			return netlink.LinkSetUp(l)
		}
		return netlink.LinkSetDown(l)
	})
}

type fakeWorld struct{ *fakeDataplane }

func (f fakeWorld) setLinkUp(netns, name string, up bool) error {
	f.setUp(netns, name, up)
	return nil
}

// TestFakeMatchesKernel is the contract between the fake dataplane and the
// kernel. The same steps (a plain pod and a VM pod as ADD makes them, a
// link taken down and up, a pod CIDR change, an ADD killed after its TAP
// and retried over it, the DELs) go to netlinkDataplane in namespaces of
// the test's own and to the fake. After each step the kernel's state,
// read back by netlink (renderKernel), must print line for line as the
// fake's does, and what Observe reports of each attachment, which CHECK
// judges, must be equal too. A fake that drifts from the kernel fails
// here, not silently in the tests built on it.
func TestFakeMatchesKernel(t *testing.T) {
	privtest.Require(t, "ip")
	node := netnstest.New(t, "pnode")
	podA, podB := netnstest.New(t, "ppoda"), netnstest.New(t, "ppodb")
	var baseline map[string]map[string]bool // links each netns was born with
	if err := node.Do(func() error {
		var err error
		baseline, err = linkSets("", podA.Path, podB.Path)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	fake := newFakeDataplane()
	fake.addNetns(podA.Path)
	fake.addNetns(podB.Path)

	gw := netip.MustParsePrefix("10.77.0.1/24")
	addrA := netip.MustParsePrefix("10.77.0.2/24")
	attachments := map[string]Attached{
		"plain": {Bridge: Link{Name: "vmlt0"}, HostVeth: Link{Name: "vmlaaaa"}, PodVeth: Link{Name: "eth0", Sandbox: podA.Path}},
		"vm":    {Bridge: Link{Name: "vmlt0"}, HostVeth: Link{Name: "vmlbbbb"}, PodVeth: Link{Name: "eth0", Sandbox: podB.Path}, Tap: &Link{Name: "tap0", Sandbox: podB.Path}},
	}
	guards := []antispoof.Port{
		{Name: "vmlaaaa", MAC: mustMAC(t, "02:76:0a:4d:00:02"), IP: addrA.Addr()},
		{Name: "vmlbbbb", MAC: mustMAC(t, "02:76:0a:4d:00:03"), IP: netip.MustParseAddr("10.77.0.3")},
	}
	// made records, per world, the links the setup calls returned: what
	// ADD puts in its result and CHECK holds Observe to.
	made := map[world]map[fakeLinkKey]Link{}
	record := func(w world, links ...Link) {
		for _, l := range links {
			made[w][fakeLinkKey{l.Sandbox, l.Name}] = l
		}
	}
	plainPod := func(w world) error {
		host, pod, err := w.SetupVeth(podA.Path, "eth0", "vmlaaaa", "vmlt0", 1400, "02:76:0a:4d:00:02", false, &VethGuard{Table: "vmlane", Port: guards[0]})
		if err != nil {
			return err
		}
		record(w, host, pod)
		return w.ConfigureAddress(podA.Path, "eth0", addrA, gw.Addr())
	}
	vmPod := func(w world) error {
		host, pod, err := w.SetupVeth(podB.Path, "eth0", "vmlbbbb", "vmlt0", 1400, "", true, &VethGuard{Table: "vmlane", Port: guards[1]})
		if err != nil {
			return err
		}
		record(w, host, pod)
		_, err = w.SetupTap(podB.Path, TapSpec{Name: "tap0", PodIf: "eth0", MTU: 1400})
		return err
	}
	steps := []struct {
		name string
		do   func(w world) error
	}{
		{"bridge", func(w world) error {
			if _, err := w.EnsureBridge("vmlt0", gw, 1400, "02:76:0a:4d:00:01"); err != nil {
				return err
			}
			if err := w.EnableForwarding(); err != nil {
				return err
			}
			for _, g := range guards {
				if err := w.Guard("vmlane", g, nil); err != nil {
					return err
				}
			}
			return nil
		}},
		{"plain pod", plainPod},
		{"VM pod", vmPod},
		{"plain pod's veth down", func(w world) error { return w.setLinkUp(podA.Path, "eth0", false) }},
		{"plain pod's veth up", func(w world) error { return w.setLinkUp(podA.Path, "eth0", true) }},
		{"plain pod's address again", func(w world) error { return w.ConfigureAddress(podA.Path, "eth0", addrA, gw.Addr()) }},
		{"pod CIDR change", func(w world) error {
			_, err := w.EnsureBridge("vmlt0", netip.MustParsePrefix("10.78.0.1/24"), 1400, "02:76:0a:4d:00:01")
			return err
		}},
		{"VM pod's veth gone, its TAP left", func(w world) error { return w.DeleteHostLink("vmlbbbb") }},
		{"VM pod again over the TAP", vmPod},
		{"VM pod deleted", func(w world) error {
			if err := w.DeleteNetnsLinks(podB.Path, "eth0", "tap0"); err != nil {
				return err
			}
			return w.DeleteHostLink("vmlbbbb")
		}},
		{"plain pod deleted", func(w world) error {
			if err := w.DeleteHostLink("vmlaaaa"); err != nil {
				return err
			}
			return w.DeleteNetnsLinks(podA.Path, "eth0")
		}},
		{"unguarded", func(w world) error { return w.Unguard("vmlane", "vmlaaaa", "vmlbbbb") }},
	}

	real, fk := world(kernelWorld{}), world(fakeWorld{fake})
	made[real], made[fk] = map[fakeLinkKey]Link{}, map[fakeLinkKey]Link{}
	for _, s := range steps {
		if err := s.do(fk); err != nil {
			t.Fatalf("%s: fake: %v", s.name, err)
		}
		var kernel []string
		var observed map[string]Observed
		if err := node.Do(func() error {
			if err := s.do(real); err != nil {
				return err
			}
			var err error
			if kernel, err = renderKernel(podA.Path, podB.Path, baseline); err != nil {
				return fmt.Errorf("reading the kernel: %w", err)
			}
			observed, err = observeAll(real, attachments)
			return err
		}); err != nil {
			t.Fatalf("%s: kernel: %v", s.name, err)
		}
		if diff := cmp.Diff(fake.state(), kernel); diff != "" {
			t.Errorf("after %s, the fake's state differs from the kernel's (-fake +kernel):\n%s", s.name, diff)
		}
		faked, err := observeAll(fk, attachments)
		if err != nil {
			t.Fatalf("%s: fake: %v", s.name, err)
		}
		for name, a := range attachments {
			for w, o := range map[world]Observed{real: observed[name], fk: faked[name]} {
				if err := matchesMade(o, a, made[w]); err != nil {
					t.Errorf("after %s, %s's Observe of the %s pod and its setup calls disagree: %v", s.name, wname(w, real), name, err)
				}
			}
			plain := a.Tap == nil
			if diff := cmp.Diff(pickedMACsOut(faked[name], plain), pickedMACsOut(observed[name], plain), cmpopts.EquateComparable(netip.Prefix{}, netip.Addr{}), cmpopts.EquateErrors()); diff != "" {
				t.Errorf("after %s, Observe of the %s pod differs (-fake +kernel):\n%s", s.name, name, diff)
			}
		}
	}
}

func wname(w, real world) string {
	if w == real {
		return "the kernel"
	}
	return "the fake"
}

func observeAll(w world, attachments map[string]Attached) (map[string]Observed, error) {
	out := map[string]Observed{}
	for name, a := range attachments {
		o, err := w.Observe(a.PodVeth.Sandbox, a)
		if err != nil {
			return nil, fmt.Errorf("Observe of the %s pod: %w", name, err)
		}
		out[name] = o
	}
	return out, nil
}

// matchesMade checks that Observe reports a's veths with the MAC and MTU
// the call that made them returned, which ADD puts in its result and
// CHECK compares.
func matchesMade(o Observed, a Attached, made map[fakeLinkKey]Link) error {
	for k, s := range map[fakeLinkKey]*LinkState{{"", a.HostVeth.Name}: o.HostVeth, {a.PodVeth.Sandbox, a.PodVeth.Name}: o.PodVeth} {
		if s == nil {
			continue
		}
		m, ok := made[k]
		if !ok {
			return fmt.Errorf("%s was not made by a setup call", s.Name)
		}
		if s.MAC != m.MAC || s.MTU != m.MTU {
			return fmt.Errorf("%s is %s mtu %d, the setup call said %s mtu %d", s.Name, s.MAC, s.MTU, m.MAC, m.MTU)
		}
	}
	return nil
}

// pickedMACsOut blanks the MACs the kernel picks at random (all but a
// pod veth whose MAC the plugin sets); matchesMade checks those against
// the setup calls instead.
func pickedMACsOut(o Observed, podMACSet bool) Observed {
	blank := func(s *LinkState, keep bool) *LinkState {
		if s == nil || keep {
			return s
		}
		c := *s
		c.MAC = ""
		return &c
	}
	o.HostVeth, o.PodVeth, o.Tap = blank(o.HostVeth, false), blank(o.PodVeth, podMACSet), blank(o.Tap, false)
	return o
}

func mustMAC(t *testing.T, s string) net.HardwareAddr {
	t.Helper()
	hw, err := net.ParseMAC(s)
	if err != nil {
		t.Fatal(err)
	}
	return hw
}

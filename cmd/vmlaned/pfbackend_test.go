package main

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vmlane/vmlane/internal/sysctl"
	"github.com/vmlane/vmlane/routes"
)

// fakeAnchor records what pfBackend loads into the anchor, as the rules
// `pfctl -a ANCHOR -s nat` would print.
type fakeAnchor struct {
	rules   []string
	full    bool
	err     error
	hookErr error // what CheckHook says
	checks  int
}

func (f *fakeAnchor) CheckHook() error { f.checks++; return f.hookErr }

func (f *fakeAnchor) Ensure(rules []string, full bool) (bool, error) {
	f.rules, f.full = slices.Clone(rules), full
	return true, f.err
}

// fakeSysctls is macOS's forwarding settings; it prints the writes made
// to them as sysctl(8) commands.
type fakeSysctls struct {
	vals   map[string]string
	writes []string
	err    error
}

func (f *fakeSysctls) Get(name string) (string, error) { return f.vals[name] + "\n", nil }

func (f *fakeSysctls) Set(name, value string) error {
	if f.err != nil {
		return f.err
	}
	f.vals[name] = value
	f.writes = append(f.writes, "sysctl -w "+name+"="+value)
	return nil
}

func TestPFBackend(t *testing.T) {
	v4 := routes.NATOptions{PodCIDR: netip.MustParsePrefix("10.244.5.0/24"), Cluster: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}
	v6 := routes.NATOptions{PodCIDR: netip.MustParsePrefix("fd00:244:0:5::/64"), Cluster: []netip.Prefix{netip.MustParsePrefix("fd00:244::/48")}}
	for _, tc := range []struct {
		name       string
		nat        []routes.NATOptions
		full       bool
		forwarding string // the settings' value before the pass
		wantRules  []string
		wantWrites []string
	}{{
		name:       "IPv4 only: IPv6 forwarding is left as it is",
		nat:        []routes.NATOptions{v4},
		full:       true,
		forwarding: "0",
		wantRules:  []string{"no nat inet from 10.244.5.0/24 to 10.244.0.0/16"},
		wantWrites: []string{"sysctl -w net.inet.ip.forwarding=1"},
	}, {
		name:       "dual stack",
		nat:        []routes.NATOptions{v4, v6},
		full:       true,
		forwarding: "0",
		wantRules:  []string{"no nat inet from 10.244.5.0/24 to 10.244.0.0/16", "no nat inet6 from fd00:244:0:5::/64 to fd00:244::/48"},
		wantWrites: []string{"sysctl -w net.inet.ip.forwarding=1", "sysctl -w net.inet6.ip6.forwarding=1"},
	}, {
		name:       "IPv6 only",
		nat:        []routes.NATOptions{v6},
		full:       true,
		forwarding: "0",
		wantRules:  []string{"no nat inet6 from fd00:244:0:5::/64 to fd00:244::/48"},
		wantWrites: []string{"sysctl -w net.inet6.ip6.forwarding=1"},
	}, {
		name:       "already on: nothing written",
		nat:        []routes.NATOptions{v4, v6},
		full:       true,
		forwarding: "1",
		wantRules:  []string{"no nat inet from 10.244.5.0/24 to 10.244.0.0/16", "no nat inet6 from fd00:244:0:5::/64 to fd00:244::/48"},
	}, {
		name:       "an event's pass leaves forwarding to the full ones",
		nat:        []routes.NATOptions{v4},
		forwarding: "0",
		wantRules:  []string{"no nat inet from 10.244.5.0/24 to 10.244.0.0/16"},
	}, {
		name: "Services routed to a gateway: the VM's own address reaches it",
		nat: []routes.NATOptions{{PodCIDR: v4.PodCIDR, Cluster: v4.Cluster, RouteServices: true,
			Services: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}}},
		forwarding: "1",
		wantRules:  []string{"no nat inet from 10.244.5.0/24 to 10.244.0.0/16", "no nat inet from 10.244.5.0/24 to 10.96.0.0/12"},
	}, {
		name:       "no pod subnet yet",
		full:       true,
		forwarding: "0",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			a := &fakeAnchor{}
			s := &fakeSysctls{vals: map[string]string{sysctl.MacIPv4Forwarding: tc.forwarding, sysctl.MacIPv6Forwarding: tc.forwarding}}
			if err := (pfBackend{pf: a, sysctl: s}).Ensure(tc.nat, tc.full); err != nil {
				t.Fatal(err)
			}
			if a.full != tc.full {
				t.Errorf("pf.Ensure full = %v, want %v", a.full, tc.full)
			}
			if diff := cmp.Diff(tc.wantRules, a.rules); diff != "" {
				t.Errorf("anchor rules (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantWrites, s.writes); diff != "" {
				t.Errorf("sysctl writes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPFBackendErrors: a failed pf load does not stop forwarding from
// being turned on, and both failures are reported.
func TestPFBackendErrors(t *testing.T) {
	a := &fakeAnchor{err: errors.New("pfctl: syntax error")}
	s := &fakeSysctls{vals: map[string]string{sysctl.MacIPv4Forwarding: "0"}, err: errors.New("Operation not permitted")}
	err := pfBackend{pf: a, sysctl: s}.Ensure([]routes.NATOptions{{PodCIDR: netip.MustParsePrefix("10.244.5.0/24")}}, true)
	if err == nil || !strings.Contains(err.Error(), "pfctl: syntax error") || !strings.Contains(err.Error(), "net.inet.ip.forwarding") {
		t.Fatalf("err = %v, want both the pf and the sysctl failure", err)
	}
}

// TestPFBackendChecksHook: each full pass checks pf's main ruleset (the
// hook that reaches vmlane's anchor) and records what it finds, without
// failing the pass; incremental passes cost no pfctl call for it.
func TestPFBackendChecksHook(t *testing.T) {
	a := &fakeAnchor{}
	s := &fakeSysctls{vals: map[string]string{sysctl.MacIPv4Forwarding: "1"}}
	b := pfBackend{pf: a, sysctl: s, hook: newHookStatus(prometheus.NewRegistry())}
	nat := []routes.NATOptions{{PodCIDR: netip.MustParsePrefix("10.244.5.0/24")}}
	if err := b.Ensure(nat, false); err != nil || a.checks != 0 {
		t.Fatalf("incremental pass: %v, %d hook checks; want none", err, a.checks)
	}
	a.hookErr = errors.New(`pf's main ruleset has no nat-anchor "com.apple/*"`)
	if err := b.Ensure(nat, true); err != nil {
		t.Fatalf("a missing hook failed the pass: %v", err)
	}
	if got := b.hook.get(); a.checks != 1 || !strings.Contains(got, "no nat-anchor") {
		t.Errorf("after a full pass with the hook gone: %d checks, problem %q", a.checks, got)
	}
	a.hookErr = nil
	if err := b.Ensure(nat, true); err != nil || b.hook.get() != "" {
		t.Errorf("hook back: %v, problem %q; want none", err, b.hook.get())
	}
}

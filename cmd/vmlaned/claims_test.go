package main

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/vmlane/vmlane/leases"
)

func TestLeaseClaims(t *testing.T) {
	until := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	f := &leases.File{
		Subnet: netip.MustParsePrefix("10.244.1.0/24"), Subnet6: netip.MustParsePrefix("fd00:10:244:1::/64"),
		Leases: []leases.Lease{
			{IP: netip.MustParseAddr("10.244.1.2"), MAC: "02:76:0a:f4:01:02", State: leases.StateReserved, Source: leases.SourceCNI}, // a plain pod
			{IP: netip.MustParseAddr("10.244.1.5"), IP6: netip.MustParseAddr("fd00:10:244:1::5"), MAC: "02:76:0a:f4:01:05", State: leases.StateBound, Source: leases.SourceCNI,
				VMName: "default/web", Pod: leases.Pod{Namespace: "default", Name: "virt-launcher-web-x"}},
			{IP: netip.MustParseAddr("10.244.1.6"), MAC: "02:76:0a:f4:01:06", State: leases.StateHeld, Source: leases.SourceCNI, VMName: "prod/db", Expires: until},
			{IP: netip.MustParseAddr("10.244.1.7"), MAC: "02:76:0a:f4:01:07", State: "migrating", Source: leases.SourceCNI, VMName: "prod/newer"},
			{IP: netip.MustParseAddr("10.244.2.8"), MAC: "02:76:0a:f4:02:08", State: leases.StateBound, Source: leases.SourceCNI, VMName: "prod/in",
				Home: netip.MustParsePrefix("10.244.2.0/24"), Pod: leases.Pod{Namespace: "prod", Name: "in-1"}},
		},
	}
	want := map[string]claimStatus{
		"default/web": {IPv4: "10.244.1.5/24", IPv6: "fd00:10:244:1::5/64", MAC: "02:76:0a:f4:01:05", Node: "node-a", Pod: "default/virt-launcher-web-x", Home: "node-a"},
		"prod/db":     {IPv4: "10.244.1.6/24", MAC: "02:76:0a:f4:01:06", Node: "node-a", HeldUntil: "2026-11-27T10:00:00Z", Home: "node-a"},
		// Moved in from node-b's subnet: its home is node-b.
		"prod/in": {IPv4: "10.244.2.8/24", MAC: "02:76:0a:f4:02:08", Node: "node-a", Pod: "prod/in-1"},
	}
	if diff := cmp.Diff(want, leaseClaims(f, "node-a")); diff != "" {
		t.Errorf("leaseClaims (-want +got):\n%s", diff)
	}
}

func TestPlanClaims(t *testing.T) {
	web := claimStatus{IPv4: "10.244.1.5/24", MAC: "02:76:0a:f4:01:05", Node: "node-a", Pod: "default/web-1", Home: "node-a"}
	webHeld := claimStatus{IPv4: "10.244.1.5/24", MAC: "02:76:0a:f4:01:05", Node: "node-a", HeldUntil: "2026-11-27T10:00:00Z", Home: "node-a"}
	webBefore := web
	webBefore.Home = "" // a claim from before homes
	movedIn := claimStatus{IPv4: "10.244.2.8/24", MAC: "02:76:0a:f4:02:08", Node: "node-a", Pod: "default/in-1"}
	webOnB := claimStatus{IPv4: "10.244.1.5/24", MAC: "02:76:0a:f4:01:05", Node: "node-b", Pod: "default/web-2", Home: "node-a"}
	webHeldOnB := claimStatus{IPv4: "10.244.1.5/24", MAC: "02:76:0a:f4:01:05", Node: "node-b", HeldUntil: "2026-11-27T10:00:00Z", Home: "node-a"}
	webOnGone := claimStatus{IPv4: "10.244.1.5/24", MAC: "02:76:0a:f4:01:05", Node: "node-gone", Pod: "default/web-2", Home: "node-a"}
	other := claimStatus{IPv4: "10.244.1.9/24", MAC: "02:76:0a:f4:01:09", Node: "node-a", Pod: "default/web-1", Home: "node-a"}
	for _, tc := range []struct {
		name     string
		want     map[string]claimStatus
		have     []claim
		heard    map[string]bool
		acts     []string
		conflict bool
	}{
		{name: "new VM", want: map[string]claimStatus{"default/web": web},
			acts: []string{"create default/web 10.244.1.5/24  02:76:0a:f4:01:05 node=node-a pod=default/web-1 held="}},
		{name: "in step", want: map[string]claimStatus{"default/web": web}, have: []claim{{VM: "default/web", Status: web, ResourceVersion: "7"}}},
		{name: "a claim from before homes keeps none", want: map[string]claimStatus{"default/web": web}, have: []claim{{VM: "default/web", Status: webBefore, ResourceVersion: "7"}}},
		{name: "moved in, its claim gone: the home makes it", want: map[string]claimStatus{"default/in": movedIn}},
		{name: "pod went", want: map[string]claimStatus{"default/web": webHeld}, have: []claim{{VM: "default/web", Status: web, ResourceVersion: "7"}},
			acts: []string{"update default/web 10.244.1.5/24  02:76:0a:f4:01:05 node=node-a pod= held=2026-11-27T10:00:00Z"}},
		{name: "came here from node-b", want: map[string]claimStatus{"default/web": web}, have: []claim{{VM: "default/web", Status: webHeldOnB, ResourceVersion: "7"}},
			acts: []string{"update default/web 10.244.1.5/24  02:76:0a:f4:01:05 node=node-a pod=default/web-1 held="}},
		{name: "migration target while the source runs", want: map[string]claimStatus{"default/web": web}, have: []claim{{VM: "default/web", Status: webOnB, ResourceVersion: "7"}}},
		{name: "migration target that heard the guest", want: map[string]claimStatus{"default/web": web}, have: []claim{{VM: "default/web", Status: webOnB, ResourceVersion: "7"}},
			heard: map[string]bool{"default/web": true},
			acts:  []string{"update default/web 10.244.1.5/24  02:76:0a:f4:01:05 node=node-a pod=default/web-1 held="}},
		{name: "held here, heard here", want: map[string]claimStatus{"default/web": webHeld}, have: []claim{{VM: "default/web", Status: webOnB, ResourceVersion: "7"}},
			heard: map[string]bool{"default/web": true}},
		{name: "source's node gone", want: map[string]claimStatus{"default/web": web}, have: []claim{{VM: "default/web", Status: webOnGone, ResourceVersion: "7"}},
			acts: []string{"update default/web 10.244.1.5/24  02:76:0a:f4:01:05 node=node-a pod=default/web-1 held="}},
		{name: "held here, running on node-b", want: map[string]claimStatus{"default/web": webHeld}, have: []claim{{VM: "default/web", Status: webOnB, ResourceVersion: "7"}}},
		{name: "hold time over", have: []claim{{VM: "default/web", Status: webHeld, ResourceVersion: "7"}}, acts: []string{"delete default/web"}},
		{name: "another node's claim", have: []claim{{VM: "default/web", Status: webOnB, ResourceVersion: "7"}}},
		{name: "addresses disagree", want: map[string]claimStatus{"default/web": other}, have: []claim{{VM: "default/web", Status: web, ResourceVersion: "7"}}, conflict: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := func(n string) bool { return n == "node-a" || n == "node-b" }
			acts, conflicts := planClaims(tc.want, tc.have, "node-a", up, tc.heard)
			var got []string
			for _, a := range acts {
				got = append(got, a.String())
				if a.Op != "create" && a.ResourceVersion != "7" {
					t.Errorf("%s without the resourceVersion it read", a)
				}
			}
			if diff := cmp.Diff(tc.acts, got); diff != "" {
				t.Errorf("actions (-want +got):\n%s", diff)
			}
			if (len(conflicts) > 0) != tc.conflict {
				t.Errorf("conflicts %v, want %v", conflicts, tc.conflict)
			}
		})
	}
}

// TestAnnouncements follows a live migration from node-a to node-b as each
// node's announcements see it, and two guests of one VM running at once.
func TestAnnouncements(t *testing.T) {
	const vm, mac = "default/web", "02:76:0a:f4:01:05"
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	mig := map[string]string{vm: mac}
	pod := "default/web-2"
	check := func(t *testing.T, a *announcements, migrating map[string]string, last map[string]time.Time, now time.Time, want bool, wantFlap bool) {
		t.Helper()
		heard, flapping := a.heard(migrating, map[string]string{vm: pod}, last, now)
		if heard[vm] != want || (len(flapping) > 0) != wantFlap {
			t.Errorf("at %v: heard %v, flapping %v; want heard %v, flapping %v", now.Sub(t0), heard, flapping, want, wantFlap)
		}
	}

	t.Run("target", func(t *testing.T) {
		var b announcements
		// The target's pod comes up at 0: the guest is paused, the
		// bridge has heard nothing from it. An entry from the VM's
		// earlier life here proves nothing either.
		check(t, &b, mig, map[string]time.Time{mac: at(-5000)}, at(0), false, false)
		check(t, &b, mig, map[string]time.Time{mac: at(-5000)}, at(200), false, false)
		// A frame right after the wait began is within the margin.
		check(t, &b, mig, map[string]time.Time{mac: at(50)}, at(400), false, false)
		// The migration ends at 3 s: the guest's gratuitous ARP.
		check(t, &b, mig, map[string]time.Time{mac: at(3000)}, at(3010), true, false)
	})

	t.Run("source", func(t *testing.T) {
		var a announcements
		// The source holds the claim: it waits for nothing. At 3.05 s
		// the claim names node-b, whose pod is up: node-a's pod (the
		// paused source) is now migrating too. Its guest's last frame
		// came at 2.99 s, before the wait began: not heard.
		check(t, &a, nil, map[string]time.Time{mac: at(2990)}, at(0), false, false)
		check(t, &a, mig, map[string]time.Time{mac: at(2990)}, at(3050), false, false)
		check(t, &a, mig, map[string]time.Time{mac: at(2990)}, at(3250), false, false)
		// The source's pod goes: nothing migrates any more.
		check(t, &a, nil, nil, at(4000), false, false)
		if len(a.waiting) != 0 {
			t.Errorf("still waiting for %v", a.waiting)
		}
	})

	t.Run("two guests at once", func(t *testing.T) {
		var b announcements
		check(t, &b, mig, nil, at(0), false, false)
		check(t, &b, mig, map[string]time.Time{mac: at(1000)}, at(1000), true, false) // takes the claim
		check(t, &b, nil, nil, at(1100), false, false)                                // holds it
		// The other node's guest pulled it back at 1.2 s; this node's
		// guest keeps talking.
		check(t, &b, mig, map[string]time.Time{mac: at(1200)}, at(1200), false, false)
		check(t, &b, mig, map[string]time.Time{mac: at(1500)}, at(1500), false, true)
		check(t, &b, mig, map[string]time.Time{mac: at(1000 + 29_000)}, at(1000+29_000), false, true)
		// retakeAfter later it may take it again (and says so no more).
		check(t, &b, mig, map[string]time.Time{mac: at(1000 + 30_000)}, at(1000+30_000), true, false)
	})

	t.Run("migrated away and back within retakeAfter", func(t *testing.T) {
		// node-b took the claim for pod web-2 at 1 s (a migration here),
		// lost it at 5 s (the VM migrated on), and at 8 s the VM
		// migrates here again, into a new pod, web-4: heard at once.
		var b announcements
		check(t, &b, mig, nil, at(0), false, false)
		check(t, &b, mig, map[string]time.Time{mac: at(1000)}, at(1000), true, false)
		check(t, &b, nil, nil, at(5000), false, false)
		pod = "default/web-4"
		check(t, &b, mig, nil, at(7000), false, false)
		check(t, &b, mig, map[string]time.Time{mac: at(8000)}, at(8000), true, false)
		pod = "default/web-2"
	})

	t.Run("an update that failed is retried", func(t *testing.T) {
		var b announcements
		check(t, &b, mig, nil, at(0), false, false)
		check(t, &b, mig, map[string]time.Time{mac: at(1000)}, at(1000), true, false)
		check(t, &b, mig, map[string]time.Time{mac: at(1200)}, at(1200), true, false)
	})
}

// TestCheckClaim: a claim the API holds but vmlane cannot use is refused
// with the field and the value, against a pod network given as many
// podCIDRs (a cluster without --cluster-cidr) or as cluster CIDRs.
func TestCheckClaim(t *testing.T) {
	var pods []netip.Prefix
	for i := range 300 {
		pods = append(pods, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i), 0}), 24))
	}
	pods = append(pods, netip.MustParsePrefix("fd00:10:244::/56"))
	good := claimStatus{IPv4: "10.244.7.5/24", IPv6: "fd00:10:244:7::5/64", MAC: "02:76:0a:f4:07:05", Node: "node-b"}
	for _, tc := range []struct {
		name    string
		edit    func(*claimStatus)
		cluster []netip.Prefix
		want    string // in the error; "" for none
	}{
		{name: "good", cluster: pods},
		{name: "good, cluster CIDRs", cluster: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/48")}},
		{name: "ipv4 outside", edit: func(s *claimStatus) { s.IPv4 = "192.168.1.5/24" }, cluster: pods,
			want: `VMClaim default/web: status.ipv4 "192.168.1.5/24" is outside the cluster's pod network [10.244.0.0/24 10.244.1.0/24 10.244.2.0/24 10.244.3.0/24] … (301 prefixes)`},
		{name: "ipv4 past the last podCIDR", edit: func(s *claimStatus) { s.IPv4 = "10.245.0.5/24" }, cluster: pods, want: `status.ipv4 "10.245.0.5/24" is outside`},
		{name: "ipv4 not an address", edit: func(s *claimStatus) { s.IPv4 = "10.244.7.5" }, cluster: pods, want: `status.ipv4 "10.244.7.5" is not an IPv4 address with its prefix length`},
		{name: "ipv4 an IPv6 one", edit: func(s *claimStatus) { s.IPv4 = "fd00:10:244:7::5/64" }, cluster: pods, want: `status.ipv4 "fd00:10:244:7::5/64" is not an IPv4`},
		{name: "ipv6 outside", edit: func(s *claimStatus) { s.IPv6 = "fd00:99::5/64" }, cluster: pods, want: `status.ipv6 "fd00:99::5/64" is outside`},
		{name: "mac", edit: func(s *claimStatus) { s.MAC = "02:76" }, cluster: pods, want: `status.mac "02:76" is not a MAC address`},
		{name: "no node", edit: func(s *claimStatus) { s.Node = "" }, cluster: pods, want: `status.node is empty`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := good
			if tc.edit != nil {
				tc.edit(&st)
			}
			_, err := checkClaim(claim{VM: "default/web", Status: st}, newPrefixSet(tc.cluster))
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one with %q", err, tc.want)
			}
		})
	}
}

// TestClashes: of claims that name one address or MAC, the oldest holds it
// and the others are refused, naming the field, the value and the holder;
// a refused claim frees nothing for the claims after it.
func TestClashes(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	mk := func(vm string, age int, v4, v6, mac string) claim {
		return claim{VM: vm, Created: t0.Add(time.Duration(age) * time.Second),
			Status: claimStatus{IPv4: v4, IPv6: v6, MAC: mac, Node: "node-b"}}
	}
	cs := []claim{
		mk("default/thief", 10, "10.244.1.5/24", "", "02:76:0a:f4:09:09"),                                  // web's IPv4, made later
		mk("default/web", 0, "10.244.1.5/24", "fd00:10:244:1::5/64", "02:76:0a:f4:01:05"),                  // the holder
		mk("default/db", 0, "10.244.1.6/24", "fd00:10:244:1::5/64", "02:76:0a:f4:01:06"),                   // web's IPv6, same age: VM name decides
		mk("prod/cache", 20, "10.244.1.7/24", "fd00:10:244:1::7/64", "02:76:0a:f4:01:05"),                  // web's MAC
		mk("prod/api", 30, "10.244.1.8/24", "fd00:10:244:1::8/64", "02:76:0a:f4:01:08"),                    // its own
		mk("prod/api2", 40, "10.244.1.8/24", "fd00:10:244:1::9/64", "02:76:0a:f4:01:09"),                   // api's IPv4
		mk("prod/moved", 50, "10.244.2.9/24", "fd00:10:244:2::9/64", strings.ToUpper("02:76:0a:f4:01:08")), // api's MAC, spelt otherwise
	}
	var us []usable
	for _, c := range cs {
		u, err := checkClaim(c, newPrefixSet([]netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/48")}))
		if err != nil {
			t.Fatal(err)
		}
		us = append(us, u)
	}
	got := clashes(us)
	want := map[string]string{
		"default/thief": `VMClaim default/thief: status.ipv4 "10.244.1.5/24" is VMClaim default/web's`,
		"default/web":   `VMClaim default/web: status.ipv6 "fd00:10:244:1::5/64" is VMClaim default/db's`,
		"prod/cache":    `status.mac "02:76:0a:f4:01:05" is VMClaim default/web's`, // web, refused, still keeps what it named first
		"prod/api2":     `status.ipv4 "10.244.1.8/24" is VMClaim prod/api's`,
		"prod/moved":    `status.mac "02:76:0A:F4:01:08" is VMClaim prod/api's`,
	}
	if len(got) != len(want) {
		t.Errorf("refused %v, want %d", got, len(want))
	}
	for vm, w := range want {
		if !strings.Contains(got[vm], w) {
			t.Errorf("%s: %q, want %q", vm, got[vm], w)
		}
	}
}

// clashesByWalk is clashes as it was first written, the reference
// TestClashIndex holds the index to: the claims from the oldest to the
// youngest, each refused when an older one named its IPv4 address, IPv6
// address or MAC first (in that order), and every claim, refused or not,
// keeping what it named first.
func clashesByWalk(cs []usable) map[string]string {
	cs = slices.Clone(cs)
	slices.SortFunc(cs, func(a, b usable) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.VM, b.VM)
	})
	first := map[clashKey]string{}
	out := map[string]string{}
	for _, u := range cs {
		for _, f := range u.fields() {
			if h, taken := first[f.key]; taken {
				out[u.VM] = fmt.Sprintf("VMClaim %s: %s %q is VMClaim %s's, an older claim; this one is not used (delete it, or give it addresses of its own)", u.VM, f.field, f.value, h)
				break
			}
		}
		for _, f := range u.fields() {
			if _, taken := first[f.key]; !taken {
				first[f.key] = u.VM
			}
		}
	}
	return out
}

// TestClashIndex: the index, changed claim by claim (added, changed,
// removed at random among claims that share few addresses and MACs),
// refuses after each change exactly what the walk over every claim does.
func TestClashIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cluster := newPrefixSet([]netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/48")})
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	x := newClashIndex()
	have := map[string]usable{}
	for step := range 3000 {
		vm := fmt.Sprintf("default/vm-%d", rng.IntN(40))
		if rng.IntN(4) == 0 {
			x.remove(vm)
			delete(have, vm)
		} else {
			st := claimStatus{IPv4: fmt.Sprintf("10.244.1.%d/24", rng.IntN(30)), MAC: fmt.Sprintf("02:76:0a:f4:01:%02x", rng.IntN(30)), Node: "node-b"}
			if rng.IntN(2) == 0 {
				st.IPv6 = fmt.Sprintf("fd00:10:244:1::%x/64", rng.IntN(30))
			}
			u, err := checkClaim(claim{VM: vm, Created: t0.Add(time.Duration(rng.IntN(10)) * time.Second), Status: st}, cluster)
			if err != nil {
				t.Fatal(err)
			}
			x.add(u)
			have[vm] = u
		}
		want := clashesByWalk(slices.Collect(maps.Values(have)))
		if got := x.refused(); !maps.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("step %d: refused %v, want %v", step, got, want)
		}
	}
}

// TestHostRouteDiff: the bridge keeps one host route per address of each
// live lease that moved in, and none for a held one, a lease of the node's
// own subnets, or a lease that is gone.
func TestHostRouteDiff(t *testing.T) {
	p := netip.MustParsePrefix
	f := &leases.File{Subnet: p("10.244.1.0/24"), Leases: []leases.Lease{
		{IP: netip.MustParseAddr("10.244.0.5"), IP6: netip.MustParseAddr("fd00:10:244::5"), Home: p("10.244.0.0/24"), Home6: p("fd00:10:244::/64"),
			MAC: "02:76:0a:f4:00:05", State: leases.StateReserved, Source: leases.SourceCNI, VMName: "default/web"},
		{IP: netip.MustParseAddr("10.244.2.7"), Home: p("10.244.2.0/24"), MAC: "02:76:0a:f4:02:07", State: leases.StateHeld, Source: leases.SourceCNI, VMName: "default/gone"},
		{IP: netip.MustParseAddr("10.244.1.9"), MAC: "02:76:0a:f4:01:09", State: leases.StateBound, Source: leases.SourceCNI, VMName: "default/home"},
	}}
	have := []netip.Prefix{p("10.244.0.5/32"), p("10.244.2.7/32"), p("10.244.3.3/32")}
	add, del := hostRouteDiff(f, have, nil)
	if want := []netip.Prefix{p("fd00:10:244::5/128")}; !slices.Equal(add, want) {
		t.Errorf("add %v, want %v", add, want)
	}
	slices.SortFunc(del, netip.Prefix.Compare)
	if want := []netip.Prefix{p("10.244.2.7/32"), p("10.244.3.3/32")}; !slices.Equal(del, want) {
		t.Errorf("del %v, want %v", del, want)
	}
	if add, del := hostRouteDiff(nil, have, nil); len(add) != 0 || len(del) != 3 {
		t.Errorf("without a lease file: add %v, del %v; want every route gone", add, del)
	}
	// Claimed elsewhere (a migration's target before the guest runs
	// here, a source that is not the VM's home after it left): no host
	// route, and the one there goes.
	add, del = hostRouteDiff(f, have, map[string]bool{"default/web": true})
	slices.SortFunc(del, netip.Prefix.Compare)
	if want := []netip.Prefix{p("10.244.0.5/32"), p("10.244.2.7/32"), p("10.244.3.3/32")}; len(add) != 0 || !slices.Equal(del, want) {
		t.Errorf("web claimed elsewhere: add %v, del %v; want no add and del %v", add, del, want)
	}
}

// TestClaimedElsewhere: the claims as listed, with this pass's actions
// done on top: a claim this node just took is its own, one it gave up or
// another node holds is elsewhere, a deleted one is nowhere.
func TestClaimedElsewhere(t *testing.T) {
	have := []claim{ // sorted by VM, as list returns them
		{VM: "default/deleted", Status: claimStatus{Node: "node-b"}},
		{VM: "default/here", Status: claimStatus{Node: "node-a"}},
		{VM: "default/left", Status: claimStatus{Node: "node-a"}},
		{VM: "default/moving-in", Status: claimStatus{Node: "node-b"}},
		{VM: "default/not-here", Status: claimStatus{Node: "node-c"}},
		{VM: "default/there", Status: claimStatus{Node: "node-c"}},
	}
	done := []claimAction{
		{Op: "update", VM: "default/moving-in", Status: claimStatus{Node: "node-a"}},
		{Op: "update", VM: "default/left", Status: claimStatus{Node: "node-b"}},
		{Op: "delete", VM: "default/deleted"},
	}
	// The node's leases: not-here has none (it is not asked about).
	got := claimedElsewhere(have, done, "node-a", []string{"default/deleted", "default/here", "default/left", "default/moving-in", "default/there"})
	want := map[string]bool{"default/left": true, "default/there": true}
	if !maps.Equal(got, want) {
		t.Errorf("claimedElsewhere = %v, want %v", got, want)
	}
}

func TestProxyDiff(t *testing.T) {
	sub6 := netip.MustParsePrefix("fd00:10:244:1::/64")
	a := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, x := range s {
			out = append(out, netip.MustParseAddr(x))
		}
		return out
	}
	add, del := proxyDiff(
		a("fd00:10:244:1::5", "fd00:10:244:1::9", "fd00:99::1"),                             // have: one kept, one stale, one not ours
		append(a("fd00:10:244:1::5", "fd00:10:244:1::7", "fd00:10:244:2::3"), netip.Addr{}), // want: one of another subnet, one missing
		sub6)
	if diff := cmp.Diff(a("fd00:10:244:1::7"), add, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
		t.Errorf("add (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(a("fd00:10:244:1::9"), del, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
		t.Errorf("del (-want +got):\n%s", diff)
	}
}

// TestFramesOnPorts: a guest counts as heard only on its own pod's port; a
// frame from its MAC on another port of the bridge (an unchecked port, a
// VM attached without CNI) is not the guest.
func TestFramesOnPorts(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	frames := map[frameKey]time.Time{
		{Port: "vmlattacker", MAC: "02:76:0a:f4:01:05"}: t0.Add(time.Second),
		{Port: "vmltarget", MAC: "02:76:0a:f4:01:09"}:   t0,
	}
	mig := map[string]string{"prod/web": "02:76:0a:f4:01:05", "prod/db": "02:76:0a:f4:01:09", "prod/gone": "02:76:0a:f4:01:0a"}
	ports := map[string]string{"prod/web": "vmltarget", "prod/db": "vmltarget"}
	got := framesOnPorts(frames, mig, ports)
	if len(got) != 1 || !got["02:76:0a:f4:01:09"].Equal(t0) {
		t.Errorf("framesOnPorts = %v, want prod/db's frame on its own port alone", got)
	}
	var a announcements
	now := t0.Add(-time.Second)
	a.heard(mig, nil, got, now)
	heard, _ := a.heard(mig, nil, framesOnPorts(map[frameKey]time.Time{{Port: "vmlattacker", MAC: "02:76:0a:f4:01:05"}: now.Add(time.Second)}, mig, ports), now.Add(2*time.Second))
	if heard["prod/web"] {
		t.Error("prod/web heard from a frame of its MAC on another port")
	}
}

// TestCheckClaimNodes: a claim is not used when its node is gone, its hold
// time has passed, or its addresses are not of its home node's subnets (a
// node's claim to another node's pod addresses); a claim of a home node the
// cluster no longer has, or from before homes, is.
func TestCheckClaimNodes(t *testing.T) {
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	nodes := map[string]nodeState{
		"node-a": {exists: true, podCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:1::/64")}},
		"node-c": {exists: true, podCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.3.0/24")}},
	}
	nodeOf := func(n string) nodeState { return nodes[n] }
	mk := func(st claimStatus) usable {
		u, err := checkClaim(claim{VM: "attacker/x", Status: st}, newPrefixSet([]netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00::/16")}))
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	for _, tc := range []struct {
		name string
		st   claimStatus
		want string // "" is usable
	}{
		{"at home", claimStatus{IPv4: "10.244.1.5/24", IPv6: "fd00:1::5/64", MAC: "02:76:0a:f4:01:05", Node: "node-c", Pod: "p/x", Home: "node-a"}, ""},
		{"from before homes", claimStatus{IPv4: "10.244.1.5/24", MAC: "02:76:0a:f4:01:05", Node: "node-c", Pod: "p/x"}, ""},
		{"home gone", claimStatus{IPv4: "10.244.1.5/24", MAC: "02:76:0a:f4:01:05", Node: "node-c", Home: "node-gone", HeldUntil: "2026-11-29T10:00:00Z"}, ""},
		{"node gone", claimStatus{IPv4: "10.244.1.5/24", MAC: "02:76:0a:f4:01:05", Node: "node-gone", Pod: "p/x", Home: "node-a"}, `status.node "node-gone" is not a node of the cluster`},
		{"hold time passed", claimStatus{IPv4: "10.244.1.5/24", MAC: "02:76:0a:f4:01:05", Node: "node-a", Home: "node-a", HeldUntil: "2026-11-28T09:59:59Z"}, "held until 2026-11-28T09:59:59Z, which has passed"},
		{"bad hold time", claimStatus{IPv4: "10.244.1.5/24", MAC: "02:76:0a:f4:01:05", Node: "node-a", Home: "node-a", HeldUntil: "tomorrow"}, `status.heldUntil "tomorrow"`},
		{"another node's pod address", claimStatus{IPv4: "10.244.1.9/24", MAC: "02:76:0a:f4:01:09", Node: "node-c", Pod: "attacker/x-1", Home: "node-c"}, "10.244.1.9 is not of its home node node-c's pod subnets"},
		{"IPv6 of another node", claimStatus{IPv4: "10.244.1.5/24", IPv6: "fd00:2::5/64", MAC: "02:76:0a:f4:01:05", Node: "node-a", Pod: "p/x", Home: "node-a"}, "fd00:2::5 is not of its home node node-a's"},
	} {
		err := checkClaimNodes(mk(tc.st), nodeOf, now)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want usable", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

package main

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestNewPlan(t *testing.T) {
	base := netip.MustParseAddr("10.252.0.0")
	for _, tc := range []struct {
		warm, timed int
		subnet      string
		lastIP      string
	}{
		{33, 800, "10.252.0.0/22", "10.252.3.74"},
		{1, 1, "10.252.0.0/22", "10.252.0.11"},
		// The /22 holds 1,024 addresses: 10 below, the broadcast one above.
		{13, 1000, "10.252.0.0/22", "10.252.3.254"},
		{14, 1000, "10.252.0.0/21", "10.252.3.255"},
		{33, 3000, "10.252.0.0/20", "10.252.11.226"},
	} {
		p, err := newPlan(base, tc.warm, tc.timed)
		if err != nil {
			t.Fatalf("newPlan(%d, %d): %v", tc.warm, tc.timed, err)
		}
		if p.subnet.String() != tc.subnet || p.gateway.String() != "10.252.0.1" {
			t.Errorf("newPlan(%d, %d): subnet %s gateway %s, want %s and 10.252.0.1", tc.warm, tc.timed, p.subnet, p.gateway, tc.subnet)
		}
		if len(p.warm) != tc.warm || len(p.timed) != tc.timed {
			t.Fatalf("newPlan(%d, %d): %d warm, %d timed", tc.warm, tc.timed, len(p.warm), len(p.timed))
		}
		if got := p.timed[len(p.timed)-1].ip.String(); got != tc.lastIP {
			t.Errorf("newPlan(%d, %d): last address %s, want %s", tc.warm, tc.timed, got, tc.lastIP)
		}
	}
	if _, err := newPlan(base, 1, 1<<16); err == nil {
		t.Error("newPlan with more than a /16 of addresses: no error")
	}
}

func TestDnsmasqHosts(t *testing.T) {
	p, err := newPlan(netip.MustParseAddr("10.252.0.0"), 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := `02:62:6e:00:00:00,10.252.0.10,[fd00:252::a],vm-00000
02:62:6e:00:00:01,10.252.0.11,[fd00:252::b],vm-00001
02:62:6e:00:00:02,10.252.0.12,[fd00:252::c],vm-00002
`
	if diff := cmp.Diff(want, p.dnsmasqHosts()); diff != "" {
		t.Errorf("hosts file (-want +got):\n%s", diff)
	}
	// MACs stay distinct past 256.
	p, _ = newPlan(netip.MustParseAddr("10.252.0.0"), 1, 300)
	if got := p.timed[299].mac.String(); got != "02:62:6e:00:01:2c" {
		t.Errorf("MAC of reservation 300 = %s", got)
	}
}

func TestParseLevels(t *testing.T) {
	got, err := parseLevels("1, 16,64")
	if err != nil || !cmp.Equal(got, []int{1, 16, 64}) {
		t.Errorf("parseLevels = %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "1,,2", "x", "-4"} {
		if _, err := parseLevels(bad); err == nil || !strings.Contains(err.Error(), "invalid level") {
			t.Errorf("parseLevels(%q) = %v, want an invalid-level error", bad, err)
		}
	}
}

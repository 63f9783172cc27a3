package leases

import (
	"fmt"
	"net/netip"
	"testing"
)

// TestReservePrefer: a preferred address is taken when allocation could
// pick it, without moving the round-robin cursor, and is only a hint
// otherwise.
func TestReservePrefer(t *testing.T) {
	subnet := netip.MustParsePrefix("10.1.0.0/24")
	s, _ := newStore6(t, subnet.String(), "fd00:1::/120")
	a := mustReserve(t, s, cniReq("a")) // 10.1.0.2, the cursor
	mustReserve(t, s, cniReq("b"))      // 10.1.0.3
	if _, _, err := s.Release(cniReq("a").Key); err != nil {
		t.Fatal(err)
	}

	// The address a's key had, free again: taken, and the cursor stays
	// at 10.1.0.3, so the next plain allocation is 10.1.0.4.
	req := cniReq("a")
	req.Prefer, req.Prefer6 = a.IP, a.IP6
	if l := mustReserve(t, s, req); l.IP != a.IP || l.IP6 != a.IP6 {
		t.Errorf("preferred %s, %s: got %s, %s", a.IP, a.IP6, l.IP, l.IP6)
	}
	if l := mustReserve(t, s, cniReq("c")); l.IP.String() != "10.1.0.4" {
		t.Errorf("after a preferred allocation the next is %s, want 10.1.0.4 (the cursor moved)", l.IP)
	}

	excl, err := ParsePool("10.1.0.100-10.1.0.199", subnet)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name          string
		prefer        string
		prefer6       string
		exclude, pool Pool
		mac           string
		want, want6   string
	}{
		{name: "held", prefer: "10.1.0.3", prefer6: "fd00:1::3", want: "10.1.0.5", want6: "fd00:1::5"},
		{name: "gateway", prefer: "10.1.0.1", prefer6: "fd00:1::1", want: "10.1.0.6", want6: "fd00:1::6"},
		{name: "broadcast", prefer: "10.1.0.255", prefer6: "fd00:1::", want: "10.1.0.7", want6: "fd00:1::7"},
		{name: "outside", prefer: "10.9.0.9", prefer6: "fd00:9::9", want: "10.1.0.8", want6: "fd00:1::8"},
		{name: "excluded", prefer: "10.1.0.150", exclude: excl, want: "10.1.0.9", want6: "fd00:1::9"},
		{name: "outside the pool", prefer: "10.1.0.50", pool: Pool{netip.MustParseAddr("10.1.0.10"), netip.MustParseAddr("10.1.0.20")}, mac: "02:00:00:00:00:10", want: "10.1.0.10"},
		{name: "free", prefer: "10.1.0.77", prefer6: "fd00:1::77", want: "10.1.0.77", want6: "fd00:1::77"},
	} {
		req := cniReq("x-" + tc.name[:3])
		if tc.mac != "" {
			req = ReserveRequest{MAC: tc.mac, Pool: tc.pool}
		}
		req.Exclude = tc.exclude
		if tc.prefer != "" {
			req.Prefer = netip.MustParseAddr(tc.prefer)
		}
		if tc.prefer6 != "" {
			req.Prefer6 = netip.MustParseAddr(tc.prefer6)
		}
		l, err := s.Reserve(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got6 := ""
		if l.IP6.IsValid() {
			got6 = l.IP6.String()
		}
		if l.IP.String() != tc.want || got6 != tc.want6 {
			t.Errorf("%s: preferring %s, %s got %s, %q; want %s, %q", tc.name, tc.prefer, tc.prefer6, l.IP, got6, tc.want, tc.want6)
		}
	}
}

// TestReservePreferMACHeld: with a derived MAC, a preferred address whose
// MAC another lease has is passed over, as allocation passes it over.
func TestReservePreferMACHeld(t *testing.T) {
	s, _ := newStore(t, "10.1.0.0/24")
	derive := func(ip netip.Addr) string {
		b := ip.As4()
		return fmt.Sprintf("02:76:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3])
	}
	other := cniReq("other")
	other.IP, other.MAC = netip.MustParseAddr("10.1.0.50"), derive(netip.MustParseAddr("10.1.0.88"))
	mustReserve(t, s, other)
	req := cniReq("a")
	req.MACFor, req.Prefer = derive, netip.MustParseAddr("10.1.0.88")
	if l := mustReserve(t, s, req); l.IP.String() != "10.1.0.2" || l.MAC != derive(l.IP) {
		t.Errorf("preferring an address whose MAC is held got %s (%s), want 10.1.0.2", l.IP, l.MAC)
	}
}

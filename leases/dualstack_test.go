package leases

import (
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// newStore6 is a dual-stack store: subnet and subnet6, gateways at .1/::1.
func newStore6(t *testing.T, subnet, subnet6 string) (*Store, *clock) {
	t.Helper()
	p, p6 := netip.MustParsePrefix(subnet), netip.MustParsePrefix(subnet6)
	c := &clock{t: t0}
	s, err := Open(filepath.Join(t.TempDir(), "leases.json"), p, p.Addr().Next(),
		WithNode("node-a"), WithClock(c.now), WithSubnet6(p6, p6.Addr().Next()))
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

func ip6s(ls []Lease) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.IP6.String())
	}
	return out
}

func TestDualStackReserveRoundRobin(t *testing.T) {
	s, _ := newStore6(t, "10.1.0.0/29", "fd00:1::/120")
	var got []Lease
	for _, id := range []string{"a", "b", "c"} {
		got = append(got, mustReserve(t, s, cniReq(id)))
	}
	// The gateway (::1) and the subnet-router anycast address (::) are
	// never handed out.
	want := []string{"fd00:1::2", "fd00:1::3", "fd00:1::4"}
	if d := cmp.Diff(want, ip6s(got)); d != "" {
		t.Fatalf("ip6 (-want +got):\n%s", d)
	}
	// No quick reuse: a released address comes back only after the rest.
	if _, _, err := s.Release(Key{ContainerID: "a", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	if l := mustReserve(t, s, cniReq("d")); l.IP6.String() != "fd00:1::5" {
		t.Errorf("after a release, ip6 = %s, want fd00:1::5 (round robin)", l.IP6)
	}
	// A retried ADD returns the same pair.
	again := mustReserve(t, s, cniReq("b"))
	if again.IP != got[1].IP || again.IP6 != got[1].IP6 {
		t.Errorf("retried Reserve = %s/%s, want %s/%s", again.IP, again.IP6, got[1].IP, got[1].IP6)
	}
}

func TestDualStackReserveRequested(t *testing.T) {
	s, _ := newStore6(t, "10.1.0.0/24", "fd00:1::/64")
	req := cniReq("a")
	req.IP6 = netip.MustParseAddr("fd00:1::aa")
	if l := mustReserve(t, s, req); l.IP6 != req.IP6 {
		t.Fatalf("ip6 = %s, want the requested %s", l.IP6, req.IP6)
	}
	for _, tc := range []struct{ ip6, want string }{
		{"fd00:1::aa", "in use"},
		{"fd00:1::1", "gateway"},
		{"fd00:1::", "anycast"},
		{"fd00:2::5", "outside subnet6"},
	} {
		r := cniReq("x-" + tc.ip6)
		r.IP6 = netip.MustParseAddr(tc.ip6)
		_, err := s.Reserve(r)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Reserve(ip6 %s) = %v, want an error saying %q", tc.ip6, err, tc.want)
		}
	}
	// A retried ADD that asks for another ip6 is a conflict.
	r := cniReq("a")
	r.IP6 = netip.MustParseAddr("fd00:1::bb")
	if _, err := s.Reserve(r); !errors.Is(err, ErrConflict) {
		t.Errorf("retried Reserve with another ip6 = %v, want ErrConflict", err)
	}
	// Nothing failed above wrote anything.
	ls, err := s.List()
	if err != nil || len(ls) != 1 {
		t.Fatalf("List = %v, %v; want the one lease", ls, err)
	}
}

func TestDualStackExhausted(t *testing.T) {
	// A /120 has 254 usable addresses (no ::0, no gateway ::1); the IPv4
	// side is larger, so IPv6 runs out first.
	s, _ := newStore6(t, "10.1.0.0/22", "fd00:1::/120")
	err := s.Update(func(tx *Tx) error {
		for i := range 254 {
			if _, err := tx.Reserve(cniReq(string(rune('a'+i%26)) + strings.Repeat("x", i/26))); err != nil {
				t.Fatalf("reserve %d: %v", i, err)
			}
		}
		_, err := tx.Reserve(cniReq("one-too-many"))
		if !errors.Is(err, ErrExhausted) {
			t.Errorf("255th Reserve = %v, want ErrExhausted", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestDualStackOnlyCNILeasesGetIP6(t *testing.T) {
	s, _ := newStore6(t, "10.1.0.0/24", "fd00:1::/64")
	l, err := s.Reserve(ReserveRequest{MAC: "52:54:00:00:00:01"})
	if err != nil {
		t.Fatal(err)
	}
	if l.IP6.IsValid() {
		t.Errorf("a dynamic DHCP lease got ip6 %s; DHCPv6 serves CNI reservations only", l.IP6)
	}
}

func TestIPv4StoreLeavesIP6Alone(t *testing.T) {
	s6, _ := newStore6(t, "10.1.0.0/24", "fd00:1::/64")
	a := mustReserve(t, s6, cniReq("a"))
	// The same file opened without subnet6 (an older network config)
	// keeps the IPv6 members and hands out no IPv6 address.
	s4, err := Open(s6.Path(), s6.Subnet(), s6.Gateway())
	if err != nil {
		t.Fatal(err)
	}
	b := mustReserve(t, s4, cniReq("b"))
	if b.IP6.IsValid() {
		t.Errorf("IPv4 store gave ip6 %s", b.IP6)
	}
	req := cniReq("c")
	req.IP6 = netip.MustParseAddr("fd00:1::9")
	if _, err := s4.Reserve(req); err == nil || !strings.Contains(err.Error(), "no IPv6 subnet") {
		t.Errorf("IPv4 store asked for an ip6: %v, want an error naming the missing subnet6", err)
	}
	snap, err := Read(s6.Path())
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := snap.ByIP(a.IP6); !ok || got.Key() != a.Key() {
		t.Errorf("ByIP(%s) = %v, %v; want attachment a", a.IP6, got.Key(), ok)
	}
	if snap.File.Subnet6.String() != "fd00:1::/64" {
		t.Errorf("subnet6 = %s after an IPv4 store wrote, want it kept", snap.File.Subnet6)
	}
	// A reservation from before the node was dual-stack gets its ip6 on
	// a retried ADD.
	b2 := mustReserve(t, s6, cniReq("b"))
	if b2.IP != b.IP || !b2.IP6.IsValid() {
		t.Errorf("retried ADD on the dual-stack store = %s/%s, want %s and an ip6", b2.IP, b2.IP6, b.IP)
	}
}

func TestSubnet6Changed(t *testing.T) {
	s, _ := newStore6(t, "10.1.0.0/24", "fd00:1::/64")
	mustReserve(t, s, cniReq("a"))
	other, err := Open(s.Path(), s.Subnet(), s.Gateway(), WithSubnet6(netip.MustParsePrefix("fd00:2::/64"), netip.MustParseAddr("fd00:2::1")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Reserve(cniReq("b")); !errors.Is(err, ErrSubnetChanged) {
		t.Errorf("Reserve with another subnet6 over live leases = %v, want ErrSubnetChanged", err)
	}
	// With the leases gone, the new subnet6 is adopted.
	if _, _, err := s.Release(Key{ContainerID: "a", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	if l := mustReserve(t, other, cniReq("b")); !netip.MustParsePrefix("fd00:2::/64").Contains(l.IP6) {
		t.Errorf("ip6 = %s, want one of the new subnet6", l.IP6)
	}
}

func TestCheckSubnet6(t *testing.T) {
	for _, tc := range []struct{ subnet, gw, want string }{
		{"fd00::/64", "fd00::1", ""},
		{"fd00::/120", "fd00::1", ""},
		{"fd00::/56", "fd00::1", "/64 to /120"},
		{"fd00::/124", "fd00::1", "/64 to /120"},
		{"10.0.0.0/24", "10.0.0.1", "not IPv6"},
		{"fd00::1/64", "fd00::1", "host bits"},
		{"fd00::/64", "fd01::1", "not a usable address"},
		{"fd00::/64", "fd00::", "not a usable address"},
	} {
		err := CheckSubnet6(netip.MustParsePrefix(tc.subnet), netip.MustParseAddr(tc.gw))
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("CheckSubnet6(%s, %s) = %v, want %q", tc.subnet, tc.gw, err, tc.want)
		}
	}
}

func TestDHCPv6States(t *testing.T) {
	s, c := newStore6(t, "10.1.0.0/24", "fd00:1::/64")
	req := cniReq("a")
	req.MAC = "52:54:00:00:00:0a"
	l := mustReserve(t, s, req)

	if _, err := s.Bind6("52:54:00:00:00:0b", l.IP6, c.t.Add(time.Hour)); !errors.Is(err, ErrConflict) {
		t.Errorf("Bind6 from another MAC = %v, want ErrConflict", err)
	}
	if _, err := s.Bind6(req.MAC, netip.MustParseAddr("fd00:1::77"), c.t.Add(time.Hour)); !errors.Is(err, ErrNotFound) {
		t.Errorf("Bind6 of an address nobody holds = %v, want ErrNotFound", err)
	}
	b, err := s.Bind6(req.MAC, l.IP6, c.t.Add(time.Hour))
	if err != nil || b.State6 != StateBound || !b.Expires6.Equal(t0.Add(time.Hour)) {
		t.Fatalf("Bind6 = %+v, %v", b, err)
	}
	if b.State != StateReserved {
		t.Errorf("Bind6 changed the IPv4 state to %s", b.State)
	}
	// The binding lapses into the reservation.
	c.advance(time.Hour)
	changed, err := s.Expire()
	if err != nil || len(changed) != 1 {
		t.Fatalf("Expire = %v, %v; want the lapsed IPv6 binding", changed, err)
	}
	got, _, _ := s.Get(req.Key)
	if got.State6 != "" || !got.Expires6.IsZero() || got.IP6 != l.IP6 {
		t.Errorf("after expiry: %+v, want ip6 kept, state6 and expires6 cleared", got)
	}
	// Release: back to reserved; releasing again is no-op.
	if _, err := s.Bind6(req.MAC, l.IP6, c.t.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if r, ok, err := s.Release6(req.MAC, l.IP6); err != nil || !ok || r.State6 != "" {
		t.Errorf("Release6 = %+v, %v, %v", r, ok, err)
	}
	if _, ok, err := s.Release6(req.MAC, l.IP6); err != nil || ok {
		t.Errorf("second Release6 = %v, %v; want nothing to release", ok, err)
	}
	// Decline: quarantined, no bind until it ends, then reserved again.
	if _, err := s.Decline6(req.MAC, l.IP6, c.t.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Bind6(req.MAC, l.IP6, c.t.Add(time.Hour)); !errors.Is(err, ErrConflict) {
		t.Errorf("Bind6 during quarantine = %v, want ErrConflict", err)
	}
	c.advance(time.Minute)
	if _, err := s.Expire(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Bind6(req.MAC, l.IP6, c.t.Add(time.Hour)); err != nil {
		t.Errorf("Bind6 after the quarantine = %v", err)
	}
}

func TestCodecRoundTripDualStack(t *testing.T) {
	s, c := newStore6(t, "10.1.0.0/24", "fd00:1::/64")
	req := cniReq("a")
	req.MAC = "52:54:00:00:00:0a"
	l := mustReserve(t, s, req)
	mustReserve(t, s, cniReq("b"))
	if _, err := s.Bind6(req.MAC, l.IP6, c.t.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"subnet6":"fd00:1::/64"`, `"gateway6":"fd00:1::1"`, `"lastReserved6":"fd00:1::3"`, `"ip6":"fd00:1::2"`, `"state6":"bound"`, `"expires6":"2026-11-22T18:00:00Z"`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("file lacks %s:\n%s", want, data)
		}
	}
	checkRoundTrip(t, data)
	// An IPv4-only file has none of the new members.
	s4, _ := newStore(t, "10.2.0.0/24")
	mustReserve(t, s4, cniReq("a"))
	data4, err := os.ReadFile(s4.Path())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data4), "6\"") {
		t.Errorf("IPv4-only file names an IPv6 member:\n%s", data4)
	}
	checkRoundTrip(t, data4)
}

// checkRoundTrip decodes data with this package and with encoding/json and
// checks both agree and that Encode gives data back.
func checkRoundTrip(t *testing.T, data []byte) {
	t.Helper()
	f, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	out, err := f.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != string(data) {
		t.Errorf("Encode(Decode(file)) differs:\n%s\nwant\n%s", out, data)
	}
	var std File
	if err := json.Unmarshal(data, &std); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(&std, f, cmpOpts, cmpopts.IgnoreTypes(UnknownMembers{})); d != "" {
		t.Errorf("Decode differs from encoding/json (-json +ours):\n%s", d)
	}
}

func TestValidateDualStack(t *testing.T) {
	base := `{"version":1,"subnet":"10.1.0.0/24","gateway":"10.1.0.1",%s"leases":[%s]}`
	lease := func(ip, extra string) string {
		return `{"mac":"","ip":"` + ip + `","state":"reserved","source":"cni","containerID":"c` + ip + `","ifname":"eth0"` + extra + `}`
	}
	for _, tc := range []struct{ top, leases, want string }{
		{`"subnet6":"fd00::/64","gateway6":"fd00::1",`, lease("10.1.0.2", `,"ip6":"fd00::2"`), ""},
		{``, lease("10.1.0.2", `,"ip6":"fd00::2"`), "no subnet6"},
		{`"subnet6":"fd00::/64",`, lease("10.1.0.2", `,"ip6":"fd01::2"`), "outside subnet6"},
		{`"subnet6":"fd00::/64","gateway6":"fd00::1",`, lease("10.1.0.2", `,"ip6":"fd00::1"`), "is the gateway"},
		{`"subnet6":"fd00::/64",`, lease("10.1.0.2", `,"ip6":"fd00::2"`) + "," + lease("10.1.0.3", `,"ip6":"fd00::2"`), "held twice"},
		{`"subnet6":"10.9.0.0/24",`, "", "not an IPv6 prefix"},
		{`"subnet6":"fd00::1/64",`, "", "host bits"},
		{`"subnet6":"fd00::/64","gateway6":"fd01::1",`, "", "outside subnet6"},
		{``, lease("10.1.0.2", `,"state6":"bound"`), "no \"ip6\""},
	} {
		data := strings.Replace(strings.Replace(base, "%s", tc.top, 1), "%s", tc.leases, 1)
		_, err := Decode([]byte(data))
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Decode(%s) = %v, want %q", data, err, tc.want)
		}
	}
}

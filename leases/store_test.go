package leases

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// cmpOpts compares netip values by value (their fields are unexported).
var cmpOpts = cmp.Options{
	cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
	cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }),
}

var t0 = time.Date(2026, 11, 22, 17, 0, 0, 0, time.UTC)

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newStore(t *testing.T, subnet string) (*Store, *clock) {
	t.Helper()
	p := netip.MustParsePrefix(subnet)
	c := &clock{t: t0}
	s, err := Open(filepath.Join(t.TempDir(), "leases.json"), p, p.Addr().Next(), WithNode("node-a"), WithClock(c.now))
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

func cniReq(id string) ReserveRequest {
	return ReserveRequest{Key: Key{ContainerID: id, IfName: "eth0"}, Pod: Pod{Namespace: "default", Name: "pod-" + id, UID: "uid-" + id}}
}

func mustReserve(t *testing.T, s *Store, req ReserveRequest) Lease {
	t.Helper()
	l, err := s.Reserve(req)
	if err != nil {
		t.Fatalf("Reserve(%v): %v", req.Key, err)
	}
	return l
}

func ips(ls []Lease) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.IP.String())
	}
	return out
}

func TestOpenValidates(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ subnet, gw, want string }{
		{"10.0.0.0/24", "10.0.1.1", "outside subnet"},
		{"10.0.0.1/24", "10.0.0.1", "host bits set"},
		{"10.0.0.0/24", "10.0.0.0", "network or broadcast"},
		{"10.0.0.0/24", "10.0.0.255", "network or broadcast"},
		{"10.0.0.0/31", "10.0.0.1", "network or broadcast"},
		{"10.0.0.0/30", "10.0.0.1", ""},
		{"fd00::/64", "fd00::1", ""},
	} {
		_, err := Open(filepath.Join(dir, "l.json"), netip.MustParsePrefix(tc.subnet), netip.MustParseAddr(tc.gw))
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Open(%s, %s) = %v, want error containing %q", tc.subnet, tc.gw, err, tc.want)
		}
	}
}

func TestAllocationSkipsReservedAddressesAndIsRoundRobin(t *testing.T) {
	s, _ := newStore(t, "10.1.0.0/29") // .1 gateway; .2-.6 usable; .7 broadcast
	var got []string
	for i := range 5 {
		got = append(got, mustReserve(t, s, cniReq(fmt.Sprint(i))).IP.String())
	}
	if diff := cmp.Diff([]string{"10.1.0.2", "10.1.0.3", "10.1.0.4", "10.1.0.5", "10.1.0.6"}, got); diff != "" {
		t.Fatalf("allocation order (-want +got):\n%s", diff)
	}
	_, err := s.Reserve(cniReq("full"))
	if !errors.Is(err, ErrExhausted) || !strings.Contains(err.Error(), "10.1.0.0/29") {
		t.Fatalf("Reserve on a full subnet = %v, want ErrExhausted naming the subnet", err)
	}
	// Free .3 then .5: the next allocation continues after the cursor
	// (.6), wrapping, so .3 (freed first) comes back before .5.
	s.Release(Key{"1", "eth0"})
	s.Release(Key{"3", "eth0"})
	if l := mustReserve(t, s, cniReq("a")); l.IP.String() != "10.1.0.3" {
		t.Errorf("after wrap got %s, want 10.1.0.3", l.IP)
	}
	if l := mustReserve(t, s, cniReq("b")); l.IP.String() != "10.1.0.5" {
		t.Errorf("got %s, want 10.1.0.5", l.IP)
	}
}

func TestJustReleasedAddressIsNotReusedWhileOthersAreFree(t *testing.T) {
	s, _ := newStore(t, "10.1.0.0/24")
	a := mustReserve(t, s, cniReq("a"))
	s.Release(Key{"a", "eth0"})
	b := mustReserve(t, s, cniReq("b"))
	if a.IP == b.IP {
		t.Fatalf("released %s was handed out again at once", a.IP)
	}
}

func TestReserveIsIdempotent(t *testing.T) {
	s, c := newStore(t, "10.1.0.0/24")
	req := cniReq("x")
	req.MACFor = func(a netip.Addr) string { return "02:00:" + hex4(a) }
	first := mustReserve(t, s, req)
	c.advance(time.Minute)
	again := mustReserve(t, s, req)
	if diff := cmp.Diff(first, again, cmpOpts); diff != "" {
		t.Fatalf("retried Reserve changed the lease (-first +again):\n%s", diff)
	}
	if first.MAC != "02:00:0a:01:00:02" {
		t.Errorf("MAC = %q, want derived 02:00:0a:01:00:02", first.MAC)
	}
	req.IP = netip.MustParseAddr("10.1.0.99")
	if _, err := s.Reserve(req); !errors.Is(err, ErrConflict) {
		t.Errorf("retry asking another IP = %v, want ErrConflict", err)
	}
	all, _ := s.List()
	if len(all) != 1 {
		t.Errorf("%d leases after retries, want 1", len(all))
	}
}

func hex4(a netip.Addr) string {
	b := a.As4()
	return fmt.Sprintf("%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3])
}

func TestRequestedIPAndMAC(t *testing.T) {
	s, _ := newStore(t, "10.1.0.0/24")
	req := cniReq("a")
	req.IP = netip.MustParseAddr("10.1.0.50")
	req.MAC = "02-AA-BB-CC-DD-EE"
	l := mustReserve(t, s, req)
	if l.IP != req.IP || l.MAC != "02:aa:bb:cc:dd:ee" {
		t.Fatalf("got %s %s, want 10.1.0.50 02:aa:bb:cc:dd:ee", l.IP, l.MAC)
	}
	for _, tc := range []struct {
		ip, mac, want string
	}{
		{"10.1.0.50", "", "in use by pod default/pod-a"},
		{"10.2.0.5", "", "outside subnet 10.1.0.0/24"},
		{"10.1.0.1", "", "is the gateway"},
		{"10.1.0.255", "", "network or broadcast"},
		{"", "02:aa:bb:cc:dd:ee", "MAC 02:aa:bb:cc:dd:ee: already in use"},
		{"", "not-a-mac", "invalid MAC"},
	} {
		req := cniReq("b")
		if tc.ip != "" {
			req.IP = netip.MustParseAddr(tc.ip)
		}
		req.MAC = tc.mac
		_, err := s.Reserve(req)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Reserve(ip %q, mac %q) = %v, want error containing %q", tc.ip, tc.mac, err, tc.want)
		}
	}
}

func TestReserveNeedsIdentity(t *testing.T) {
	s, _ := newStore(t, "10.1.0.0/24")
	if _, err := s.Reserve(ReserveRequest{Key: Key{ContainerID: "a"}}); err == nil {
		t.Error("CNI reservation without ifname succeeded")
	}
	if _, err := s.Reserve(ReserveRequest{Source: SourceDHCP}); err == nil {
		t.Error("DHCP lease without MAC succeeded")
	}
}

func TestPoolAndExclude(t *testing.T) {
	subnet := netip.MustParsePrefix("10.1.0.0/24")
	s, _ := newStore(t, subnet.String())
	dyn, err := ParsePool("10.1.0.200-10.1.0.201", subnet)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"10.1.0.200", "10.1.0.201"} {
		l := mustReserve(t, s, ReserveRequest{MAC: fmt.Sprintf("02:00:00:00:00:%02x", i), Pool: dyn})
		if l.IP.String() != want || l.Source != SourceDHCP {
			t.Errorf("dynamic lease %d = %s/%s, want %s/dhcp", i, l.IP, l.Source, want)
		}
	}
	if _, err := s.Reserve(ReserveRequest{MAC: "02:00:00:00:00:09", Pool: dyn}); !errors.Is(err, ErrExhausted) {
		t.Errorf("third dynamic lease = %v, want ErrExhausted", err)
	}
	// CNI allocation keeps out of the dynamic range even after wrapping.
	excl, _ := ParsePool("10.1.0.2-10.1.0.253", subnet)
	req := cniReq("c")
	req.Exclude = excl
	if l := mustReserve(t, s, req); l.IP.String() != "10.1.0.254" {
		t.Errorf("excluded allocation got %s, want 10.1.0.254", l.IP)
	}
	for _, bad := range []string{"10.1.0.5", "10.1.0.9-10.1.0.5", "10.1.0.0-10.1.0.5", "10.1.0.5-10.1.1.5", "x-y"} {
		if _, err := ParsePool(bad, subnet); err == nil {
			t.Errorf("ParsePool(%q) succeeded", bad)
		}
	}
}

func TestBindReleaseDeclineExpire(t *testing.T) {
	s, c := newStore(t, "10.1.0.0/24")
	req := cniReq("vm")
	req.MAC = "02:00:00:00:00:01"
	l := mustReserve(t, s, req)

	if _, err := s.Bind("02:00:00:00:00:02", l.IP, c.t.Add(time.Hour), ""); !errors.Is(err, ErrConflict) {
		t.Errorf("Bind from another MAC = %v, want ErrConflict", err)
	}
	if _, err := s.Bind(req.MAC, netip.MustParseAddr("10.1.0.77"), c.t.Add(time.Hour), ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("Bind of an unheld IP = %v, want ErrNotFound", err)
	}
	b, err := s.Bind(req.MAC, l.IP, c.t.Add(time.Hour), "vm")
	if err != nil || b.State != StateBound || !b.Expires.Equal(t0.Add(time.Hour)) || b.Hostname != "vm" {
		t.Fatalf("Bind = %+v, %v", b, err)
	}

	// A dynamic lease and a declined address beside it.
	d := mustReserve(t, s, ReserveRequest{MAC: "02:00:00:00:00:03", Expires: c.t.Add(time.Minute)})
	dec, err := s.Decline(netip.MustParseAddr("10.1.0.9"), "02:00:00:00:00:04", c.t.Add(10*time.Minute))
	if err != nil || dec.State != StateDeclined {
		t.Fatalf("Decline = %+v, %v", dec, err)
	}
	if _, err := s.Bind("02:00:00:00:00:04", dec.IP, c.t.Add(time.Hour), ""); !errors.Is(err, ErrConflict) {
		t.Errorf("Bind of a quarantined address = %v, want ErrConflict", err)
	}

	c.advance(2 * time.Minute) // the offer expires
	changed, err := s.Expire()
	if err != nil || len(changed) != 1 || changed[0].IP != d.IP {
		t.Fatalf("Expire after 2m = %v, %v; want the offer %s", ips(changed), err, d.IP)
	}
	c.advance(2 * time.Hour) // the binding and the quarantine expire
	changed, _ = s.Expire()
	if diff := cmp.Diff([]string{l.IP.String(), "10.1.0.9"}, ips(changed)); diff != "" {
		t.Errorf("Expire after 2h (-want +got):\n%s", diff)
	}
	all, _ := s.List()
	if len(all) != 1 || all[0].State != StateReserved || !all[0].Expires.IsZero() {
		t.Fatalf("after expiry want the CNI reservation back to reserved, got %+v", all)
	}

	if _, ok, err := s.Release(req.Key); !ok || err != nil {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	if _, ok, err := s.Release(req.Key); ok || err != nil {
		t.Fatalf("second Release = %v, %v; want not found and no error", ok, err)
	}
}

func TestReleaseMAC(t *testing.T) {
	s, c := newStore(t, "10.1.0.0/24")
	req := cniReq("vm")
	req.MAC = "02:00:00:00:00:01"
	l := mustReserve(t, s, req)
	s.Bind(req.MAC, l.IP, c.t.Add(time.Hour), "")
	mustReserve(t, s, ReserveRequest{MAC: "02:00:00:00:00:02"})
	s.Update(func(tx *Tx) error {
		tx.ReleaseMAC("02:00:00:00:00:01")
		tx.ReleaseMAC("02:00:00:00:00:02")
		return nil
	})
	all, _ := s.List()
	if len(all) != 1 || all[0].State != StateReserved || all[0].IP != l.IP {
		t.Fatalf("after DHCPRELEASE want only the CNI reservation, reserved; got %+v", all)
	}
}

func TestGC(t *testing.T) {
	s, _ := newStore(t, "10.1.0.0/24")
	for _, id := range []string{"a", "b", "c"} {
		mustReserve(t, s, cniReq(id))
	}
	mustReserve(t, s, ReserveRequest{MAC: "02:00:00:00:00:09"})
	released, err := s.GC([]Key{{"b", "eth0"}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, l := range released {
		ids = append(ids, l.ContainerID)
	}
	if diff := cmp.Diff([]string{"a", "c"}, ids); diff != "" {
		t.Errorf("GC released (-want +got):\n%s", diff)
	}
	all, _ := s.List()
	if len(all) != 2 {
		t.Errorf("after GC %d leases, want b and the DHCP lease", len(all))
	}
}

func TestUpdateIsAllOrNothing(t *testing.T) {
	s, _ := newStore(t, "10.1.0.0/24")
	boom := errors.New("boom")
	err := s.Update(func(tx *Tx) error {
		if _, err := tx.Reserve(cniReq("a")); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Path()); !os.IsNotExist(err) {
		t.Fatalf("a failed Update wrote the file: %v", err)
	}
}

func TestCorruptFileIsKeptAndRefused(t *testing.T) {
	for name, content := range map[string]string{
		"garbage":     "{not json",
		"version":     `{"version":3,"subnet":"10.1.0.0/24","leases":[]}`,
		"duplicateIP": `{"version":1,"subnet":"10.1.0.0/24","gateway":"10.1.0.1","leases":[{"mac":"","ip":"10.1.0.2","state":"reserved","source":"cni","created":"2026-01-01T00:00:00Z"},{"mac":"","ip":"10.1.0.2","state":"reserved","source":"cni","created":"2026-01-01T00:00:00Z"}]}`,
		"truncated":   `{"version":1,"subnet":"10.1.0.0/24","gateway":"10.1.0.1","leases":[{"mac":"","ip":"10.1`,
	} {
		t.Run(name, func(t *testing.T) {
			s, _ := newStore(t, "10.1.0.0/24")
			os.WriteFile(s.Path(), []byte(content), 0o644)
			_, err := s.Reserve(cniReq("a"))
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), s.Path()) {
				t.Fatalf("Reserve on a corrupt file = %v, want ErrCorrupt naming the file", err)
			}
			if got, _ := os.ReadFile(s.Path()); string(got) != content {
				t.Fatal("the store changed a file it could not read")
			}
		})
	}
}

func TestSubnetChange(t *testing.T) {
	s, _ := newStore(t, "10.1.0.0/24")
	mustReserve(t, s, cniReq("a"))
	p := netip.MustParsePrefix("10.2.0.0/24")
	s2, err := Open(s.Path(), p, netip.MustParseAddr("10.2.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Reserve(cniReq("b")); !errors.Is(err, ErrSubnetChanged) {
		t.Fatalf("Reserve under a new subnet with live leases = %v, want ErrSubnetChanged", err)
	}
	s.Release(Key{"a", "eth0"})
	if l, err := s2.Reserve(cniReq("b")); err != nil || !p.Contains(l.IP) {
		t.Fatalf("Reserve after the old leases are gone = %v, %v; want an address of %s", l.IP, err, p)
	}
}

func TestFullDiskLeavesOldFile(t *testing.T) {
	// A read-only folder stands in for a full disk: the temp file cannot
	// be created, so the write fails before touching the lease file.
	if os.Geteuid() == 0 {
		t.Skip("root ignores folder permissions; TestFullDiskKeepsOldFile covers a real ENOSPC as root")
	}
	s, _ := newStore(t, "10.1.0.0/24")
	mustReserve(t, s, cniReq("a"))
	before, _ := os.ReadFile(s.Path())
	dir := filepath.Dir(s.Path())
	os.Chmod(dir, 0o555)
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	if _, err := s.Reserve(cniReq("b")); err == nil {
		t.Fatal("Reserve succeeded in a read-only folder")
	}
	if after, _ := os.ReadFile(s.Path()); string(after) != string(before) {
		t.Fatal("failed write changed the lease file")
	}
}

func TestDerivedMACHeldByAnotherLeaseSkipsTheAddress(t *testing.T) {
	s, _ := newStore(t, "10.1.0.0/24")
	derive := func(a netip.Addr) string { return "02:76:" + hex4(a) }
	// A runtime asked for the MAC that .3 would derive, for address .2.
	first := cniReq("a")
	first.MAC = derive(netip.MustParseAddr("10.1.0.3"))
	mustReserve(t, s, first)
	req := cniReq("b")
	req.MACFor = derive
	l := mustReserve(t, s, req)
	if l.IP.String() != "10.1.0.4" {
		t.Errorf("got %s, want 10.1.0.4 (.3's derived MAC is taken)", l.IP)
	}
}

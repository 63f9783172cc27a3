package leases

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func vmReq(id, vm string) ReserveRequest {
	r := cniReq(id)
	r.VM, r.VMName = true, vm
	r.MACFor = func(a netip.Addr) string {
		b := a.As4()
		return "02:76:" + strings.Join([]string{hex2(b[0]), hex2(b[1]), hex2(b[2]), hex2(b[3])}, ":")
	}
	return r
}

func hex2(b byte) string { const h = "0123456789abcdef"; return string([]byte{h[b>>4], h[b&15]}) }

// A VM's addresses and MAC outlive its pod: the next pod of the VM gets
// them, a plain pod in between never does, and they go when the hold time
// ends.
func TestVMLeaseHeldAcrossPods(t *testing.T) {
	s, c := newStore6(t, "10.1.0.0/29", "fd00:1::/120")
	first := mustReserve(t, s, vmReq("a", "default/vm1"))
	if _, _, err := s.Release(first.Key()); err != nil {
		t.Fatal(err)
	}
	held, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 1 || held[0].State != StateHeld || held[0].ContainerID != "" || held[0].BridgePort != "" ||
		!held[0].Expires.Equal(t0.Add(DefaultVMHold)) || held[0].MAC != first.MAC {
		t.Fatalf("after DEL: %+v, want one held lease with the MAC, no attachment, expiring after %s", held, DefaultVMHold)
	}
	snap, err := Read(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := snap.ByMAC(first.MAC); ok {
		t.Errorf("ByMAC of a held lease = %+v, want none: nothing answers for it", l)
	}
	// Plain pods fill the subnet and never get the VM's address or MAC.
	for _, id := range []string{"p1", "p2", "p3", "p4"} {
		l := mustReserve(t, s, cniReq(id))
		if l.IP == first.IP || l.IP6 == first.IP6 {
			t.Fatalf("plain pod %s got the held VM's address %s/%s", id, l.IP, l.IP6)
		}
	}
	if _, err := s.Reserve(cniReq("p5")); !errors.Is(err, ErrExhausted) {
		t.Fatalf("Reserve with only the VM's address left = %v, want ErrExhausted", err)
	}
	c.advance(time.Hour)
	again := mustReserve(t, s, vmReq("b", "default/vm1"))
	if again.IP != first.IP || again.IP6 != first.IP6 || again.MAC != first.MAC || again.State != StateReserved || again.ContainerID != "b" || !again.Expires.IsZero() {
		t.Fatalf("the VM's next pod got %+v, want %s %s %s reserved for attachment b", again, first.IP, first.IP6, first.MAC)
	}
	// A retried ADD of the new pod is the same lease.
	if l := mustReserve(t, s, vmReq("b", "default/vm1")); l.IP != first.IP {
		t.Errorf("retried ADD got %s", l.IP)
	}
	// The same name in another namespace is another VM.
	if _, err := s.Reserve(vmReq("c", "other/vm1")); !errors.Is(err, ErrExhausted) {
		t.Errorf("other/vm1 = %v, want its own address (none left: ErrExhausted)", err)
	}
}

func TestVMLeaseTwoLivePods(t *testing.T) {
	s, _ := newStore(t, "10.1.0.0/24")
	mustReserve(t, s, vmReq("a", "default/vm1"))
	_, err := s.Reserve(vmReq("b", "default/vm1"))
	if !errors.Is(err, ErrVMInUse) || !strings.Contains(err.Error(), "default/vm1") || !strings.Contains(err.Error(), "default/pod-a") {
		t.Fatalf("second pod of a VM = %v, want ErrVMInUse naming the VM and pod-a", err)
	}
	// A holder whose netns is gone (its DEL never came) gives way.
	stale := vmReq("b", "default/vm1")
	stale.Stale = func(l Lease) bool { return l.ContainerID == "a" }
	l := mustReserve(t, s, stale)
	if l.ContainerID != "b" {
		t.Fatalf("takeover from a stale holder: %+v", l)
	}
	if _, ok, _ := s.Get(Key{ContainerID: "a", IfName: "eth0"}); ok {
		t.Error("the stale attachment still has a lease")
	}
}

func TestVMLeaseHoldEndsAndRelease(t *testing.T) {
	p := netip.MustParsePrefix("10.1.0.0/24")
	c := &clock{t: t0}
	path := filepath.Join(t.TempDir(), "leases.json")
	s, err := Open(path, p, p.Addr().Next(), WithClock(c.now), WithVMHold(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	mustReserve(t, s, vmReq("a", "default/vm1"))
	mustReserve(t, s, vmReq("b", "default/vm2"))
	// GC of attachments the runtime no longer lists holds VM leases too.
	if _, err := s.GC(nil); err != nil {
		t.Fatal(err)
	}
	c.advance(9 * time.Minute)
	if ch, err := s.Expire(); err != nil || len(ch) != 0 {
		t.Fatalf("Expire before the hold time = %v, %v", ch, err)
	}
	c.advance(time.Minute)
	ch, err := s.Expire()
	if err != nil || len(ch) != 2 {
		t.Fatalf("Expire at the hold time = %v, %v; want both held leases freed", ch, err)
	}
	if ls, _ := s.List(); len(ls) != 0 {
		t.Fatalf("leases left: %+v", ls)
	}
	// ReleaseVM gives back a held lease at once, and refuses an attached one.
	mustReserve(t, s, vmReq("c", "default/vm1"))
	err = s.Update(func(tx *Tx) error {
		_, _, err := tx.ReleaseVM("default/vm1")
		return err
	})
	if !errors.Is(err, ErrVMInUse) {
		t.Fatalf("ReleaseVM of an attached VM = %v, want ErrVMInUse", err)
	}
	if _, _, err := s.Release(Key{ContainerID: "c", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	var released bool
	if err := s.Update(func(tx *Tx) (err error) { _, released, err = tx.ReleaseVM("default/vm1"); return err }); err != nil || !released {
		t.Fatalf("ReleaseVM of a held VM = %v, %v", released, err)
	}
	if ls, _ := s.List(); len(ls) != 0 {
		t.Fatalf("leases left after ReleaseVM: %+v", ls)
	}
	if _, err := Open(path, p, p.Addr().Next(), WithVMHold(0)); err == nil || !strings.Contains(err.Error(), "hold time") {
		t.Errorf("Open with a zero hold time = %v, want an error naming it", err)
	}
	if _, err := Open(path, p, p.Addr().Next(), WithVMHold(-time.Second)); err == nil {
		t.Error("Open with a negative hold time succeeded")
	}
}

// A held lease round-trips, and a file whose held lease lost its VM is
// refused: nothing could ever take it over or tell whose it is.
func TestVMLeaseFile(t *testing.T) {
	s, _ := newStore(t, "10.1.0.0/24")
	l := mustReserve(t, s, vmReq("a", "default/vm1"))
	if _, _, err := s.Release(l.Key()); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"state":"held"`) && !strings.Contains(string(data), `"state": "held"`) {
		t.Fatalf("file has no held lease:\n%s", data)
	}
	f, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if f.Leases[0].VMName != "default/vm1" || f.Leases[0].State != StateHeld {
		t.Fatalf("decoded %+v", f.Leases[0])
	}
	bad := strings.Replace(string(data), `default/vm1`, ``, 1)
	if _, err := Decode([]byte(bad)); err == nil || !strings.Contains(err.Error(), "vmName") {
		t.Errorf("a held lease without vmName = %v, want an error naming vmName", err)
	}
}

func TestVMName(t *testing.T) {
	for _, tc := range []struct{ ns, name, want string }{
		{"default", "vm1", ""},
		{"default", "web.prod-1", ""},
		{"default", "VM1", `VM name "VM1"`},
		{"default", "-vm", `VM name "-vm"`},
		{"default", "vm.", `VM name "vm."`},
		{"default", "a..b", `VM name "a..b"`},
		{"default", "", `VM name ""`},
		{"default", strings.Repeat("a", 254), "253"},
		{"Default", "vm1", `namespace "Default"`},
		{"a.b", "vm1", `namespace "a.b"`},
	} {
		got, err := VMName(tc.ns, tc.name)
		if tc.want == "" {
			if err != nil || got != tc.ns+"/"+tc.name {
				t.Errorf("VMName(%q, %q) = %q, %v", tc.ns, tc.name, got, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("VMName(%q, %q) = %v, want an error with %q", tc.ns, tc.name, err, tc.want)
		}
	}
	if _, err := ParseVMName("vm1"); err == nil {
		t.Error("ParseVMName without a namespace succeeded")
	}
}

// A VM whose claim says its addresses belong to another node's subnets
// moves in: the lease lies outside the file's subnets, the file turns
// version 2 while it has one, and back to 1 once it is gone.
func TestVMMoveIn(t *testing.T) {
	s, c := newStore6(t, "10.1.1.0/24", "fd00:1:1::/64")
	req := vmReq("b", "default/vm1")
	req.IP, req.IP6, req.MAC = netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("fd00:1::5"), "02:76:0a:01:00:05"
	req.Home, req.Home6 = netip.MustParsePrefix("10.1.0.0/24"), netip.MustParsePrefix("fd00:1::/64")
	l := mustReserve(t, s, req)
	if l.IP != req.IP || l.IP6 != req.IP6 || l.MAC != req.MAC || l.Home != req.Home || l.Home6 != req.Home6 {
		t.Fatalf("moved in: %+v", l)
	}
	data, _ := os.ReadFile(s.Path())
	if !strings.HasPrefix(string(data), `{"version":2,`) {
		t.Fatalf("a file with a lease that moved in is not version 2:\n%s", data)
	}
	if _, err := Read(s.Path()); err != nil {
		t.Fatal(err)
	}
	// Plain pods still get addresses of the node's own subnet.
	if p := mustReserve(t, s, cniReq("p")); p.IP.String() != "10.1.1.2" {
		t.Errorf("plain pod got %s", p.IP)
	}
	// The VM's DEL holds its addresses here as it does at home; its next
	// pod here takes them back.
	if _, _, err := s.Release(req.Key); err != nil {
		t.Fatal(err)
	}
	again := mustReserve(t, s, vmReq("c", "default/vm1"))
	if again.IP != req.IP || again.Home != req.Home || again.State != StateReserved {
		t.Fatalf("the VM's next pod here: %+v", again)
	}
	// Bad claims.
	for name, edit := range map[string]func(*ReserveRequest){
		"ip outside home": func(r *ReserveRequest) { r.IP = netip.MustParseAddr("10.9.0.5") },
		"home is this node": func(r *ReserveRequest) {
			r.Home, r.IP = netip.MustParsePrefix("10.1.1.0/24"), netip.MustParseAddr("10.1.1.9")
		},
		"ip6 without home6": func(r *ReserveRequest) { r.Home6 = netip.Prefix{} },
		"held ip":           func(r *ReserveRequest) { r.VMName = "default/vm2" },
	} {
		r := req
		r.Key = Key{ContainerID: "x", IfName: "eth0"}
		r.VMName = "default/vm3"
		r.MAC = "02:76:0a:01:00:09"
		edit(&r)
		if r.VMName == "default/vm2" {
			r.MAC = "02:76:0a:01:00:0a"
		}
		if _, err := s.Reserve(r); err == nil {
			t.Errorf("%s: moved in", name)
		}
	}
	if _, _, err := s.Release(Key{ContainerID: "c", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	c.advance(DefaultVMHold)
	if _, err := s.Expire(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve(cniReq("q")); err != nil {
		t.Fatal(err)
	}
	data, _ = os.ReadFile(s.Path())
	if !strings.HasPrefix(string(data), `{"version":1,`) {
		t.Errorf("the file stays version 2 after its last moved-in lease went:\n%s", data)
	}
}

// The home node holds a VM's addresses of its subnet while the VM runs on
// another node: a held lease, its hold time renewed by each HoldFor.
func TestVMHoldFor(t *testing.T) {
	s, c := newStore6(t, "10.1.0.0/24", "fd00:1::/64")
	ip, ip6, mac := netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("fd00:1::5"), "02:76:0a:01:00:05"
	hold := func() error {
		return s.Update(func(tx *Tx) error { return tx.HoldFor("default/vm1", ip, ip6, mac) })
	}
	if err := hold(); err != nil {
		t.Fatal(err)
	}
	v0, _ := s.Version()
	c.advance(time.Hour)
	if err := hold(); err != nil {
		t.Fatal(err)
	}
	if v, _ := s.Version(); v != v0 {
		t.Error("HoldFor rewrote the file with most of the hold time left")
	}
	c.advance(DefaultVMHold / 2)
	if err := hold(); err != nil {
		t.Fatal(err)
	}
	ls, _ := s.List()
	if len(ls) != 1 || ls[0].State != StateHeld || ls[0].IP6 != ip6 || !ls[0].Expires.Equal(t0.Add(time.Hour+DefaultVMHold/2+DefaultVMHold)) {
		t.Fatalf("held: %+v", ls)
	}
	// The VM's pod coming back takes it over.
	back := mustReserve(t, s, vmReq("a", "default/vm1"))
	if back.IP != ip || back.MAC != mac {
		t.Fatalf("back home: %+v", back)
	}
	// An address another lease holds is refused.
	err := s.Update(func(tx *Tx) error { return tx.HoldFor("default/vm2", ip, netip.Addr{}, "02:76:0a:01:00:07") })
	if !errors.Is(err, ErrInUse) {
		t.Errorf("HoldFor of a held address = %v, want ErrInUse", err)
	}
	err = s.Update(func(tx *Tx) error {
		return tx.HoldFor("default/vm3", netip.MustParseAddr("10.2.0.5"), netip.Addr{}, "02:76:0a:02:00:05")
	})
	if err == nil {
		t.Error("HoldFor of another subnet's address succeeded")
	}
}

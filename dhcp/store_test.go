package dhcp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/vmlane/vmlane/leases"
)

// TestWithStore runs the protocol against the real lease file.
func TestWithStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.json")
	subnet := netip.MustParsePrefix("10.98.0.0/24")
	now := t0
	st, err := leases.Open(path, subnet, serverIP, leases.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Reserve(leases.ReserveRequest{Key: leases.Key{ContainerID: "c1", IfName: "eth0"}, MAC: cniMAC.String(), IP: cniIP, Pod: leases.Pod{Namespace: "ns", Name: "vm-a"}}); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.DynamicRange = &leases.Pool{First: netip.MustParseAddr("10.98.0.200"), Last: netip.MustParseAddr("10.98.0.210")}
	h, _ := newTestHandler(t, cfg, NewStoreAllocator(st))
	fileLease := func(mac net.HardwareAddr) (leases.Lease, bool) {
		t.Helper()
		snap, err := leases.Read(path)
		if err != nil {
			t.Fatal(err)
		}
		return snap.At(now).ByMAC(mac.String())
	}
	dora := func(mac net.HardwareAddr) *dhcpv4.DHCPv4 {
		t.Helper()
		offer := handle(t, h, discover(t, mac))
		if offer == nil {
			t.Fatalf("no offer for %s", mac)
		}
		ack := handle(t, h, must[*dhcpv4.DHCPv4](t)(dhcpv4.NewRequestFromOffer(offer)))
		if ack == nil || ack.MessageType() != dhcpv4.MessageTypeAck {
			t.Fatalf("no ACK for %s: %v", mac, ack)
		}
		return ack
	}

	// CNI reservation: ACKed, bound on disk with the lease's expiry.
	ack := dora(cniMAC)
	l, ok := fileLease(cniMAC)
	if !ok || l.State != leases.StateBound || !l.Expires.Equal(t0.Add(time.Hour)) || l.IP != cniIP || l.Hostname != "vm-a" {
		t.Fatalf("after ACK the file has %+v, want bound until %s", l, t0.Add(time.Hour))
	}
	if ack.HostName() != "vm-a" {
		t.Errorf("hostname = %q", ack.HostName())
	}
	// RELEASE: back to reserved, still the pod's.
	handle(t, h, release(t, cniMAC, cniIP))
	if l, _ := fileLease(cniMAC); l.State != leases.StateReserved || !l.Expires.IsZero() {
		t.Errorf("after RELEASE: %+v, want reserved without expiry", l)
	}

	// Dynamic: the offer is on disk before the OFFER is returned.
	offer := handle(t, h, discover(t, otherMAC))
	if offer == nil {
		t.Fatal("no dynamic offer")
	}
	l, ok = fileLease(otherMAC)
	if !ok || l.Source != leases.SourceDHCP || l.IP != addrOf(offer.YourIPAddr) || !l.Expires.Equal(t0.Add(OfferHold)) {
		t.Fatalf("offer on disk = %+v (found %v), want %s held until %s", l, ok, offer.YourIPAddr, t0.Add(OfferHold))
	}
	first := l.IP
	handle(t, h, must[*dhcpv4.DHCPv4](t)(dhcpv4.NewRequestFromOffer(offer)))
	if l, _ := fileLease(otherMAC); l.State != leases.StateBound {
		t.Fatalf("dynamic lease after ACK: %+v", l)
	}
	// DECLINE: quarantined; the next DISCOVER gets another address.
	handle(t, h, decline(t, otherMAC, first))
	snap, _ := leases.Read(path)
	if q, _ := snap.ByIP(first); q.State != leases.StateDeclined || !q.Expires.Equal(t0.Add(DefaultQuarantine)) {
		t.Errorf("declined lease = %+v", q)
	}
	ack = dora(otherMAC)
	if addrOf(ack.YourIPAddr) == first {
		t.Errorf("after DECLINE the same address %s was offered again", first)
	}
	// RELEASE of a dynamic lease frees it.
	handle(t, h, release(t, otherMAC, addrOf(ack.YourIPAddr)))
	if _, ok := fileLease(otherMAC); ok {
		t.Errorf("dynamic lease still held after RELEASE")
	}

	// CNI decline keeps the attachment and quarantines the address.
	handle(t, h, decline(t, cniMAC, cniIP))
	snap, _ = leases.Read(path)
	if q, _ := snap.ByIP(cniIP); q.State != leases.StateDeclined || q.ContainerID != "c1" {
		t.Errorf("declined CNI lease = %+v", q)
	}
}

// cniReservation is a lease file in a temporary folder on 10.98.0.0/24
// holding one CNI reservation, cniIP for mac (attachment c1/eth0).
func cniReservation(t *testing.T, mac string, opts ...leases.Option) (*leases.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "leases.json")
	st, err := leases.Open(path, netip.MustParsePrefix("10.98.0.0/24"), serverIP, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Reserve(leases.ReserveRequest{Key: leases.Key{ContainerID: "c1", IfName: "eth0"}, MAC: mac, IP: cniIP}); err != nil {
		t.Fatal(err)
	}
	return st, path
}

// TestDeclinedReservationSaysWhy: after a CNI reservation's DECLINE the
// MAC's DISCOVERs get no answer, counted as "declined", not as a MAC the
// server knows nothing of.
func TestDeclinedReservationSaysWhy(t *testing.T) {
	st, _ := cniReservation(t, cniMAC.String(), leases.WithClock(func() time.Time { return t0 }))
	for name, a := range map[string]StoreAllocator{"cached": NewStoreAllocator(st), "locked": {Store: st}} {
		t.Run(name, func(t *testing.T) {
			h, d := newTestHandler(t, testConfig(), a)
			handle(t, h, decline(t, cniMAC, cniIP))
			if reply := handle(t, h, discover(t, cniMAC)); reply != nil {
				t.Fatalf("OFFER for a quarantined reservation: %v", reply)
			}
			if len(d.drop) == 0 || d.drop[len(d.drop)-1] != DropDeclined {
				t.Errorf("drop reasons %v, want the last to be %q", d.drop, DropDeclined)
			}
		})
	}
}

// TestOneLeasePerMAC: a VM whose CNI reservation it DECLINEd gets no
// dynamic address meanwhile, with a dynamic range or without: when the
// quarantine ended its reservation came back too, and the MAC had two
// leases that the lookup, the store and Read disagreed on.
func TestOneLeasePerMAC(t *testing.T) {
	st, path := cniReservation(t, cniMAC.String(), leases.WithClock(func() time.Time { return t0 }))
	cfg := testConfig()
	cfg.DynamicRange = &leases.Pool{First: netip.MustParseAddr("10.98.0.200"), Last: netip.MustParseAddr("10.98.0.210")}
	h, d := newTestHandler(t, cfg, NewStoreAllocator(st))
	handle(t, h, decline(t, cniMAC, cniIP))
	if reply := handle(t, h, discover(t, cniMAC)); reply != nil {
		t.Errorf("OFFER %s to a MAC whose reservation is quarantined", reply.YourIPAddr)
	}
	if len(d.drop) == 0 || d.drop[len(d.drop)-1] != DropDeclined {
		t.Errorf("drop reasons %v, want the last to be %q", d.drop, DropDeclined)
	}
	// The store refuses the lease whoever asks.
	if _, err := st.Reserve(leases.ReserveRequest{Source: leases.SourceDHCP, MAC: cniMAC.String(), Pool: *cfg.DynamicRange}); !errors.Is(err, leases.ErrInUse) {
		t.Errorf("a dynamic lease for the MAC of a quarantined reservation: %v, want ErrInUse", err)
	}
	snap, _ := leases.Read(path)
	n := 0
	for _, l := range snap.Leases() {
		if l.MAC == cniMAC.String() {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d leases carry %s, want 1:\n%+v", n, cniMAC, snap.Leases())
	}
}

// TestLookupCacheFollowsTheFile: the cached lookup sees every change a
// writer (here the CNI plugin's side, through the store) makes, and answers
// like the locked lookup: declined leases are not the MAC's, a lapsed
// binding still is.
func TestLookupCacheFollowsTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.json")
	now := t0
	st, err := leases.Open(path, netip.MustParsePrefix("10.98.0.0/24"), serverIP, leases.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	cached, locked := NewStoreAllocator(st), StoreAllocator{Store: st}
	check := func(step string, wantOK bool) {
		t.Helper()
		for name, a := range map[string]StoreAllocator{"cached": cached, "locked": locked} {
			l, ok, err := a.Lookup(cniMAC)
			if err != nil || ok != wantOK || (ok && l.IP != cniIP) {
				t.Errorf("%s: %s Lookup = %+v, %v, %v; want found=%v", step, name, l, ok, err, wantOK)
			}
		}
	}
	check("no file", false)
	key := leases.Key{ContainerID: "c1", IfName: "eth0"}
	if _, err := st.Reserve(leases.ReserveRequest{Key: key, MAC: cniMAC.String(), IP: cniIP}); err != nil {
		t.Fatal(err)
	}
	check("reserved", true)
	if _, err := st.Bind(cniMAC.String(), cniIP, now.Add(time.Minute), ""); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Hour) // the binding lapsed; the reservation stands
	check("lapsed binding", true)
	if _, err := st.Decline(cniIP, cniMAC.String(), now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	check("declined", false)
	if _, _, err := st.Release(key); err != nil {
		t.Fatal(err)
	}
	check("released", false)
}

// TestEarlyACKChecksContent: the lease file rewritten, the way every
// writer does it (a new file renamed over it), to the same size and mtime
// but another owner for a CNI reservation's address: a REQUEST from the
// old owner's MAC gets no ACK. The rewrite goes through a second file
// first, which frees the first one's inode, so the final file can get the
// number back (ext4 and tmpfs hand a freed inode out again at once): with
// the lookup cache keyed on the file's identity alone, the early ACK of a
// CNI reservation (sent before its bind is written) went out for an
// address that had gone to another pod. The cache now holds the file it
// parsed open, so its inode is not freed.
func TestEarlyACKChecksContent(t *testing.T) {
	const oldMAC, newMAC = "02:00:00:00:00:0a", "02:00:00:00:00:0b"
	st, path := cniReservation(t, oldMAC)
	a := NewStoreAllocator(st).Defer(t.Context(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	h, _ := newTestHandler(t, testConfig(), a)
	old, _ := net.ParseMAC(oldMAC)
	if ack := handle(t, h, initReboot(t, old, cniIP)); ack == nil || ack.MessageType() != dhcpv4.MessageTypeAck {
		t.Fatalf("the owner's first REQUEST: %v, want an ACK", ack)
	}
	a.Flush()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	swapped := bytes.ReplaceAll(bytes.ReplaceAll(data, []byte(oldMAC), []byte(newMAC)), []byte(`"c1"`), []byte(`"c2"`))
	if len(swapped) != len(data) || bytes.Equal(swapped, data) {
		t.Fatal("setup: the rewrite must keep the size and change the content")
	}
	for i, content := range [][]byte{data, swapped} {
		tmp := fmt.Sprintf("%s.tmp%d", path, i)
		if err := os.WriteFile(tmp, content, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if ack := handle(t, h, initReboot(t, old, cniIP)); ack != nil && ack.MessageType() == dhcpv4.MessageTypeAck {
		t.Errorf("ACKed %s to %s after the address went to %s", cniIP, oldMAC, newMAC)
	}
	snap, err := leases.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := snap.ByIP(cniIP); !ok || l.MAC != newMAC {
		t.Errorf("the file's lease of %s: %+v, want %s's", cniIP, l, newMAC)
	}
}

// TestLookupCacheHoldsItsFile: the file the cache parsed stays open, so
// its inode number is never the number of a later file at the path, which
// is what lets lookupFresh trust an unchanged identity. Without the hold,
// the second of two rewrites gets the first file's inode back here.
func TestLookupCacheHoldsItsFile(t *testing.T) {
	st, path := cniReservation(t, cniMAC.String())
	c := NewStoreAllocator(st).cache
	if _, ok, err := c.lookupFresh(cniMAC.String()); !ok || err != nil {
		t.Fatalf("lookupFresh = %v, %v", ok, err)
	}
	held := c.id.ino
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		tmp := fmt.Sprintf("%s.tmp%d", path, i)
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
		if id, _, _ := statID(path); id.ino == held {
			t.Fatalf("rewrite %d has inode %d, the cache's file's", i+1, held)
		}
	}
	if _, ok, err := c.lookupFresh(cniMAC.String()); !ok || err != nil || c.id.ino == held {
		t.Errorf("after the rewrites lookupFresh = %v, %v, holding inode %d (was %d)", ok, err, c.id.ino, held)
	}
}

package dhcp

import (
	"io"
	"log/slog"
	"net/netip"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/vmlane/vmlane/leases"
)

// FuzzHandle feeds arbitrary bytes through the path a packet takes in the
// server: parse, then Handle. Neither may panic, and a reply must
// serialize and parse again.
func FuzzHandle(f *testing.F) {
	// More seeds live in testdata/fuzz/FuzzHandle.
	if d, err := dhcpv4.NewDiscovery(cniMAC); err == nil {
		f.Add(d.ToBytes())
	}
	cfg := testConfig()
	cfg.DynamicRange = &leases.Pool{First: netip.MustParseAddr("10.98.0.200"), Last: netip.MustParseAddr("10.98.0.202")}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := dhcpv4.FromBytes(data)
		if err != nil {
			return
		}
		h, err := NewHandler(cfg, newFake(cniLease()), WithLogger(log))
		if err != nil {
			t.Fatal(err)
		}
		r, err := h.Handle(req)
		if err != nil {
			t.Fatalf("Handle with a working allocator: %v", err)
		}
		if r == nil {
			return
		}
		if _, err := dhcpv4.FromBytes(r.ToBytes()); err != nil {
			t.Fatalf("reply does not parse: %v\n%s", err, r.Summary())
		}
		if r.ServerIdentifier() == nil {
			t.Fatalf("reply without server identifier: %s", r.Summary())
		}
	})
}

// FuzzHandle6 is FuzzHandle for DHCPv6: the UDP payload a packet socket
// hands Server6 (parse, then Handle6 over a real dual-stack lease store).
// Neither may panic; a reply must serialize and parse again, carry our
// server identifier and the request's transaction ID, and never give an
// address other than the MAC's reservation.
func FuzzHandle6(f *testing.F) {
	// More seeds live in testdata/fuzz/FuzzHandle6.
	for _, t := range []dhcpv6.MessageType{dhcpv6.MessageTypeSolicit, dhcpv6.MessageTypeRebind, dhcpv6.MessageTypeConfirm} {
		f.Add(msg6(t, []string{"fd00:10:244:3::2"}).ToBytes(), true)
	}
	f.Add(msg6(dhcpv6.MessageTypeRequest, []string{"fd00:10:244:3::2"},
		dhcpv6.OptServerID(&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: serverMAC})).ToBytes(), true)
	f.Add([]byte{1, 0, 0, 1}, false)
	f.Fuzz(func(t *testing.T, data []byte, vm bool) {
		req, err := dhcpv6.MessageFromBytes(data)
		if err != nil {
			return
		}
		h, _ := handler6(t, store6(t))
		mac := strayMAC
		if vm {
			mac = vmMAC
		}
		r, err := h.Handle(req, mac)
		if err != nil {
			t.Fatalf("Handle with a working store: %v", err)
		}
		if r == nil {
			return
		}
		back, err := dhcpv6.MessageFromBytes(r.ToBytes())
		if err != nil {
			t.Fatalf("reply does not parse: %v\n%s", err, r.Summary())
		}
		if sid := back.Options.ServerID(); sid == nil || !sid.Equal(h.ServerID()) || back.TransactionID != req.TransactionID {
			t.Fatalf("reply without our server identifier or the request's xid: %s", back.Summary())
		}
		for _, ia := range back.Options.IANA() {
			for _, a := range ia.Options.Addresses() {
				if a.ValidLifetime > 0 && (!vm || a.IPv6Addr.String() != "fd00:10:244:3::2") {
					t.Fatalf("reply gives %s to %s: %s", a.IPv6Addr, mac, back.Summary())
				}
			}
		}
	})
}

// FuzzParseUDP6 checks that Server6's packet parser never panics on what a
// packet socket hands it, and that what it returns lies inside the packet.
func FuzzParseUDP6(f *testing.F) {
	b := make([]byte, 52)
	b[0], b[6], b[45] = 0x60, 17, 12
	f.Add(b)
	f.Add(b[:47])
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, p, ok := parseUDP6(b)
		if ok && (len(b) < 48 || len(p) > len(b)-48) {
			t.Fatalf("payload of %d bytes from a packet of %d", len(p), len(b))
		}
	})
}

// FuzzParseUDP4 checks that the packet parser of renewals for other
// servers never panics on what a packet socket hands it, and that what it
// returns lies inside the packet's UDP datagram.
func FuzzParseUDP4(f *testing.F) {
	b := make([]byte, 40)
	b[0], b[3], b[9], b[25] = 0x45, 40, 17, 20
	f.Add(b)
	f.Add(b[:27])
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, p, ok := parseUDP4(b)
		if ok && (len(b) < 28 || len(p) > len(b)-28) {
			t.Fatalf("payload of %d bytes from a packet of %d", len(p), len(b))
		}
	})
}

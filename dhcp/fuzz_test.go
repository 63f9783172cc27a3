package dhcp

import (
	"io"
	"log/slog"
	"net/netip"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
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

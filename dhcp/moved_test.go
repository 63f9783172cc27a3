package dhcp

import (
	"bytes"
	"net"
	"net/netip"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// A VM whose addresses moved in from another node's subnet gets that
// subnet's mask, broadcast address and gateway (in option 3 and as option
// 121's default route), as at home; its INIT-REBOOT for the address is
// ACKed, not NAKed as of the wrong network, and so is its rebinding.
// Server identifier and the other options are this node's.
func TestMovedInLeaseGetsItsHomeSubnet(t *testing.T) {
	l := cniLease()
	l.IP, l.Home = netip.MustParseAddr("10.97.0.5"), netip.MustParsePrefix("10.97.0.0/24")
	h, d := newTestHandler(t, testConfig(), newFake(l))
	offer := handle(t, h, discover(t, cniMAC))
	if offer == nil || offer.MessageType() != dhcpv4.MessageTypeOffer {
		t.Fatalf("offer = %v (drops %v)", offer, d.drop)
	}
	ack := handle(t, h, must[*dhcpv4.DHCPv4](t)(dhcpv4.NewRequestFromOffer(offer)))
	for _, r := range []*dhcpv4.DHCPv4{offer, ack} {
		if r == nil {
			t.Fatal("no reply")
		}
		if !r.YourIPAddr.Equal(net.IPv4(10, 97, 0, 5)) {
			t.Errorf("%s: yiaddr %s", r.MessageType(), r.YourIPAddr)
		}
		if got := r.SubnetMask(); !bytes.Equal(got, net.CIDRMask(24, 32)) {
			t.Errorf("%s: mask %v", r.MessageType(), got)
		}
		if got := r.Router(); len(got) != 1 || !got[0].Equal(net.IPv4(10, 97, 0, 1)) {
			t.Errorf("%s: router %v, want the home subnet's gateway 10.97.0.1", r.MessageType(), got)
		}
		if got := r.BroadcastAddress(); !got.Equal(net.IPv4(10, 97, 0, 255)) {
			t.Errorf("%s: broadcast %v", r.MessageType(), got)
		}
		if got := r.ServerIdentifier(); !got.Equal(net.IPv4(10, 98, 0, 1)) {
			t.Errorf("%s: server identifier %v, want this node's", r.MessageType(), got)
		}
		if got := r.GetOneOption(dhcpv4.OptionClasslessStaticRoute); !bytes.Equal(got, []byte{0, 10, 97, 0, 1}) {
			t.Errorf("%s: option 121 %v, want the default route via 10.97.0.1", r.MessageType(), got)
		}
	}
	if r := handle(t, h, initReboot(t, cniMAC, l.IP)); r == nil || r.MessageType() != dhcpv4.MessageTypeAck {
		t.Errorf("INIT-REBOOT of the moved-in address: %v (naks %v)", r, d.nak)
	}
	// A live-migrated guest's renewal went to its home node's server,
	// which no longer answers for it; its rebinding (ciaddr, broadcast)
	// reaches this one.
	if r := handle(t, h, renewing(t, cniMAC, l.IP)); r == nil || r.MessageType() != dhcpv4.MessageTypeAck {
		t.Errorf("REBINDING of the moved-in address: %v (naks %v)", r, d.nak)
	}
}

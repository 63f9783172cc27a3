package ndproxy

import (
	"bytes"
	"net/netip"
	"testing"
)

// FuzzParse: any frame a guest sends, read by Parse and IsRouterSolicit; a
// solicitation Parse accepts gets an advertisement whose checksum
// verifies, back to its sender, for a unicast target, that Parse itself
// does not take for a solicitation.
func FuzzParse(f *testing.F) {
	f.Add(solicit(guestMAC, guestIP, solicitedNode(homePod), homePod, 255, nil))
	f.Add(solicit(guestMAC, guestIP, homePod, homePod, 255, nil))
	f.Add(solicit(guestMAC, netip.IPv6Unspecified(), solicitedNode(homePod), homePod, 255, nil))
	f.Fuzz(func(t *testing.T, frame []byte) {
		IsRouterSolicit(frame)
		s, ok := Parse(frame)
		if !ok {
			return
		}
		if s.Target.IsMulticast() || !s.Target.Is6() || len(s.SrcMAC) != 6 {
			t.Fatalf("Parse accepted %+v", s)
		}
		na := Advert(s, bridgeMAC)
		if !bytes.Equal(na[:6], s.SrcMAC) {
			t.Fatalf("advertisement to %x, the solicitation came from %s", na[:6], s.SrcMAC)
		}
		if c := checksum(s.Target, s.Src, na[etherLen+ipv6Len:]); c != 0 {
			t.Fatalf("advertisement checksum does not verify: %#04x", c)
		}
		if _, ok := Parse(na); ok {
			t.Fatal("Parse took the advertisement for a solicitation")
		}
	})
}

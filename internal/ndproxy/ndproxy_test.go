package ndproxy

import (
	"encoding/binary"
	"encoding/hex"
	"net"
	"net/netip"
	"strings"
	"testing"
)

var (
	guestMAC  = net.HardwareAddr{0x02, 0x76, 0x0a, 0xf4, 0x09, 0x06}
	bridgeMAC = net.HardwareAddr{0x02, 0x76, 0x00, 0x00, 0x00, 0x01}
	guestIP   = netip.MustParseAddr("fd00:10:244:9::6")
	homePod   = netip.MustParseAddr("fd00:10:244:9::5")
)

// solicit builds the frame of a neighbour solicitation: from src (and
// srcMAC) to dst for target, with a source link-layer option unless src is
// unspecified; edit, when set, changes the packet before its checksum.
func solicit(srcMAC net.HardwareAddr, src, dst, target netip.Addr, hop byte, edit func(icmp []byte) []byte) []byte {
	icmp := make([]byte, nsLen)
	icmp[0] = icmpNS
	t := target.As16()
	copy(icmp[8:], t[:])
	if !src.IsUnspecified() {
		icmp = append(icmp, 1, 1)
		icmp = append(icmp, srcMAC...)
	}
	if edit != nil {
		icmp = edit(icmp)
	}
	binary.BigEndian.PutUint16(icmp[2:], checksum(src, dst, icmp))
	f := make([]byte, etherLen+ipv6Len)
	copy(f[0:], []byte{0x33, 0x33, 0xff, t[13], t[14], t[15]})
	copy(f[6:], srcMAC)
	binary.BigEndian.PutUint16(f[12:], 0x86dd)
	f[etherLen] = 0x60
	binary.BigEndian.PutUint16(f[etherLen+4:], uint16(len(icmp)))
	f[etherLen+6], f[etherLen+7] = protoICMPv6, hop
	s, d := src.As16(), dst.As16()
	copy(f[etherLen+8:], s[:])
	copy(f[etherLen+24:], d[:])
	return append(f, icmp...)
}

func solicitedNode(a netip.Addr) netip.Addr {
	b := a.As16()
	return netip.AddrFrom16([16]byte{0: 0xff, 1: 0x02, 11: 0x01, 12: 0xff, 13: b[13], 14: b[14], 15: b[15]})
}

func TestParse(t *testing.T) {
	sn := solicitedNode(homePod)
	good := solicit(guestMAC, guestIP, sn, homePod, 255, nil)
	s, ok := Parse(good)
	if !ok {
		t.Fatal("Parse of a valid solicitation: not ok")
	}
	if s.SrcMAC.String() != guestMAC.String() || s.Src != guestIP || s.Dst != sn || s.Target != homePod {
		t.Errorf("Parse = %+v", s)
	}
	// A unicast probe (NUD) to the target itself.
	if s, ok := Parse(solicit(guestMAC, guestIP, homePod, homePod, 255, nil)); !ok || s.Dst != homePod {
		t.Errorf("Parse of a unicast probe = %+v, %v", s, ok)
	}
	// Duplicate address detection: from ::, to the solicited-node group.
	if s, ok := Parse(solicit(guestMAC, netip.IPv6Unspecified(), sn, homePod, 255, nil)); !ok || !s.Src.IsUnspecified() {
		t.Errorf("Parse of a DAD probe = %+v, %v", s, ok)
	}
	for _, tc := range []struct {
		name  string
		frame []byte
	}{
		{"empty", nil},
		{"truncated", good[:len(good)-9]},
		{"hop limit 254 (routed, not from the link)", solicit(guestMAC, guestIP, sn, homePod, 254, nil)},
		{"bad checksum", func() []byte { f := append([]byte(nil), good...); f[len(f)-1] ^= 1; return f }()},
		{"code 1", solicit(guestMAC, guestIP, sn, homePod, 255, func(b []byte) []byte { b[1] = 1; return b })},
		{"an advertisement", solicit(guestMAC, guestIP, sn, homePod, 255, func(b []byte) []byte { b[0] = icmpNA; return b })},
		{"multicast target", solicit(guestMAC, guestIP, sn, netip.MustParseAddr("ff02::1"), 255, nil)},
		{"option of length 0", solicit(guestMAC, guestIP, sn, homePod, 255, func(b []byte) []byte { b[nsLen+1] = 0; return b })},
		{"option longer than the packet", solicit(guestMAC, guestIP, sn, homePod, 255, func(b []byte) []byte { b[nsLen+1] = 2; return b })},
		{"DAD with a source link-layer option", solicit(guestMAC, netip.IPv6Unspecified(), sn, homePod, 255, func(b []byte) []byte { return append(b, 1, 1, 2, 0, 0, 0, 0, 1) })},
		{"DAD not to the solicited-node group", solicit(guestMAC, netip.IPv6Unspecified(), netip.MustParseAddr("ff02::1"), homePod, 255, nil)},
		{"IPv4", func() []byte { f := append([]byte(nil), good...); f[12], f[13] = 0x08, 0x00; return f }()},
	} {
		if s, ok := Parse(tc.frame); ok {
			t.Errorf("%s: Parse = %+v, ok", tc.name, s)
		}
	}
}

func TestAnswers(t *testing.T) {
	g := Guest{Port: "veth1", MAC: guestMAC, Home: netip.MustParsePrefix("fd00:10:244:9::/64")}
	onBridge := func(a netip.Addr) bool { return a == guestIP || a == netip.MustParseAddr("fd00:10:244:9::7") }
	sn := solicitedNode(homePod)
	for _, tc := range []struct {
		name string
		s    Solicit
		want bool
	}{
		{"a home pod", Solicit{SrcMAC: guestMAC, Src: guestIP, Dst: sn, Target: homePod}, true},
		{"from its link-local address", Solicit{SrcMAC: guestMAC, Src: netip.MustParseAddr("fe80::76:aff:fef4:906"), Dst: sn, Target: homePod}, true},
		{"its own address", Solicit{SrcMAC: guestMAC, Src: guestIP, Dst: solicitedNode(guestIP), Target: guestIP}, false},
		{"another VM on this bridge", Solicit{SrcMAC: guestMAC, Src: guestIP, Dst: sn, Target: netip.MustParseAddr("fd00:10:244:9::7")}, false},
		{"outside its home subnet", Solicit{SrcMAC: guestMAC, Src: guestIP, Dst: sn, Target: netip.MustParseAddr("fd00:10:244:8::5")}, false},
		{"DAD", Solicit{SrcMAC: guestMAC, Src: netip.IPv6Unspecified(), Dst: sn, Target: homePod}, false},
		{"another MAC", Solicit{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 9}, Src: guestIP, Dst: sn, Target: homePod}, false},
	} {
		if got := g.Answers(tc.s, onBridge); got != tc.want {
			t.Errorf("%s: Answers = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestAdvert(t *testing.T) {
	s, ok := Parse(solicit(guestMAC, guestIP, solicitedNode(homePod), homePod, 255, nil))
	if !ok {
		t.Fatal("Parse: not ok")
	}
	got := Advert(s, bridgeMAC)
	want := strings.ReplaceAll(""+
		"02760af40906 027600000001 86dd"+ // to the guest, from the bridge
		" 60000000 0020 3a ff"+ // 32 bytes of ICMPv6, hop limit 255
		" fd000010024400090000000000000005"+ // from the target
		" fd000010024400090000000000000006"+ // to the guest
		" 88 00 1503 60000000"+ // NA, checksum (computed apart), solicited and override
		" fd000010024400090000000000000005"+
		" 02 01 027600000001", " ", "") // target link-layer address
	if hex.EncodeToString(got) != want {
		t.Errorf("Advert =\n%x\nwant\n%s", got, want)
	}
	icmp := got[etherLen+ipv6Len:]
	if c := checksum(homePod, guestIP, icmp); c != 0 {
		t.Errorf("the advertisement's checksum does not verify: %#04x", c)
	}
}

// TestRouterAdvert: the frame around a router advertisement goes to all
// nodes from the router's link-local address and MAC, hop limit 255, with
// a checksum that verifies; and a router solicitation is told apart.
func TestRouterAdvert(t *testing.T) {
	ll := netip.MustParseAddr("fe80::76:ff:fe00:1")
	msg := []byte{134, 0, 0xde, 0xad, 64, 0xc0, 0x07, 0x08, 0, 0, 0, 0, 0, 0, 0, 0}
	f := RouterAdvert(msg, bridgeMAC, ll)
	want := strings.ReplaceAll("333300000001 027600000001 86dd 60000000 0010 3a ff"+
		" fe800000000000000076 00fffe000001 ff020000000000000000000000000001", " ", "")
	if got := hex.EncodeToString(f[:etherLen+ipv6Len]); got != want {
		t.Errorf("headers %s, want %s", got, want)
	}
	if c := checksum(ll, netip.MustParseAddr("ff02::1"), f[etherLen+ipv6Len:]); c != 0 {
		t.Errorf("checksum does not verify: %#04x", c)
	}
	if msg[2] != 0xde {
		t.Error("RouterAdvert changed its argument")
	}
	rs := solicit(guestMAC, netip.MustParseAddr("fe80::76:aff:fef4:906"), netip.MustParseAddr("ff02::2"), homePod, 255, func(b []byte) []byte {
		b[0] = icmpRS
		return b[:8] // type, code, checksum, reserved
	})
	if !IsRouterSolicit(rs) {
		t.Error("IsRouterSolicit of a router solicitation: false")
	}
	for name, f := range map[string][]byte{
		"a neighbour solicitation": solicit(guestMAC, guestIP, solicitedNode(homePod), homePod, 255, nil),
		"hop limit 64":             func() []byte { b := append([]byte(nil), rs...); b[etherLen+7] = 64; return b }(),
		"bad checksum":             func() []byte { b := append([]byte(nil), rs...); b[len(b)-1] ^= 1; return b }(),
		"truncated":                rs[:len(rs)-1],
	} {
		if IsRouterSolicit(f) {
			t.Errorf("IsRouterSolicit of %s: true", name)
		}
	}
}

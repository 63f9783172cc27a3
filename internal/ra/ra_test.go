package ra

import (
	"encoding/hex"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

var mac = net.HardwareAddr{0x02, 0x76, 0x0a, 0xf4, 0x03, 0x01}

func TestBuild(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Config
		life time.Duration
		want string // hex, spaces between fields for the reader
	}{
		{"minimal", Config{Iface: "br0", Prefix: netip.MustParsePrefix("fd00:10:244:3::/64")}, DefaultRouterLifetime,
			"86 00 0000 40 c0 0708 00000000 00000000" +
				" 01 01 02760af40301" +
				" 03 04 40 80 00015180 00003840 00000000 fd000010024400030000000000000000"},
		{"mtu, dns, search, last", Config{Iface: "br0", Prefix: netip.MustParsePrefix("fd00::/120"), MTU: 1450, Interval: 100 * time.Second,
			DNS: []netip.Addr{netip.MustParseAddr("fd00:96::a")}, Search: []string{"svc.cluster.local."}}, 0,
			"86 00 0000 40 c0 0000 00000000 00000000" +
				" 01 01 02760af40301" +
				" 05 01 0000 000005aa" +
				" 03 04 78 80 00015180 00003840 00000000 fd000000000000000000000000000000" +
				" 19 03 0000 0000012c fd00009600000000000000000000000a" +
				// DNSSL: 8 header bytes + 19 name bytes, padded to 32
				" 1f 04 0000 0000012c 03737663 07636c7573746572 056c6f63616c 00 0000000000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Build(tc.c, mac, tc.life)
			if err != nil {
				t.Fatal(err)
			}
			want := strings.ReplaceAll(tc.want, " ", "")
			if hex.EncodeToString(got) != want {
				t.Errorf("Build =\n%x\nwant\n%s", got, want)
			}
			if len(got)%8 != 0 {
				t.Errorf("length %d is not a multiple of 8", len(got))
			}
		})
	}
}

func TestConfigChecks(t *testing.T) {
	p := netip.MustParsePrefix("fd00::/64")
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{Prefix: p}, "Iface is empty"},
		{Config{Iface: "br0", Prefix: netip.MustParsePrefix("10.0.0.0/24")}, "Prefix 10.0.0.0/24 is not an IPv6"},
		{Config{Iface: "br0", Prefix: netip.MustParsePrefix("fd00::1/64")}, "host bits"},
		{Config{Iface: "br0", Prefix: p, MTU: 1000}, "MTU 1000"},
		{Config{Iface: "br0", Prefix: p, RouterLifetime: 3 * time.Hour}, "RouterLifetime"},
		{Config{Iface: "br0", Prefix: p, DNS: []netip.Addr{netip.MustParseAddr("10.96.0.10")}}, "not IPv6"},
		{Config{Iface: "br0", Prefix: p, Search: []string{"a..b"}}, "label"},
	} {
		if _, err := Build(tc.c, mac, time.Second); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Build(%+v) = %v, want %q", tc.c, err, tc.want)
		}
	}
	if _, err := Build(Config{Iface: "br0", Prefix: p}, mac[:4], time.Second); err == nil {
		t.Error("Build took a 4-byte MAC")
	}
}

func TestIsSolicit(t *testing.T) {
	for _, tc := range []struct {
		b    []byte
		want bool
	}{
		{[]byte{133, 0, 0, 0, 0, 0, 0, 0}, true},
		{[]byte{133, 0, 0, 0, 0, 0, 0, 0, 1, 1, 2, 0x76, 0x0a, 0xf4, 3, 1}, true},
		{[]byte{133, 1, 0, 0, 0, 0, 0, 0}, false},
		{[]byte{134, 0, 0, 0, 0, 0, 0, 0}, false},
		{[]byte{133, 0, 0}, false},
	} {
		if got := isSolicit(tc.b); got != tc.want {
			t.Errorf("isSolicit(%x) = %v", tc.b, got)
		}
	}
}

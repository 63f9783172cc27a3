package netaddr

import (
	"net"
	"net/netip"
	"testing"
)

func TestLastAddr(t *testing.T) {
	for in, want := range map[string]string{
		"10.244.3.0/24":   "10.244.3.255",
		"10.244.3.7/24":   "10.244.3.255", // host bits are ignored
		"10.0.0.0/8":      "10.255.255.255",
		"10.0.0.0/31":     "10.0.0.1",
		"10.0.0.1/32":     "10.0.0.1",
		"0.0.0.0/0":       "255.255.255.255",
		"fd00::/64":       "fd00::ffff:ffff:ffff:ffff",
		"fd00:0:0:1::/63": "fd00::1:ffff:ffff:ffff:ffff",
	} {
		if got := LastAddr(netip.MustParsePrefix(in)).String(); got != want {
			t.Errorf("LastAddr(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestPrefix: Prefix undoes IPNet for both families, unmaps an IPv4 address
// the net package holds in 16 bytes, and gives the zero Prefix for nil.
func TestPrefix(t *testing.T) {
	for _, s := range []string{"10.244.1.0/24", "10.244.0.5/32", "fd00:10:244::5/128", "0.0.0.0/0"} {
		p := netip.MustParsePrefix(s)
		if got := Prefix(IPNet(p)); got != p {
			t.Errorf("Prefix(IPNet(%s)) = %s", p, got)
		}
	}
	if got := Prefix(&net.IPNet{IP: net.ParseIP("10.1.2.0"), Mask: net.CIDRMask(24, 32)}); got != netip.MustParsePrefix("10.1.2.0/24") {
		t.Errorf("a 16-byte IPv4 address: %s", got)
	}
	if got := Prefix(nil); got.IsValid() {
		t.Errorf("Prefix(nil) = %s", got)
	}
}

func TestFromIP(t *testing.T) {
	for _, c := range []struct {
		in   net.IP
		want string
	}{
		{net.ParseIP("10.1.2.3"), "10.1.2.3"}, // 16 bytes, v4-mapped
		{net.IPv4(10, 1, 2, 3).To4(), "10.1.2.3"},
		{net.ParseIP("fd00::1"), "fd00::1"},
		{nil, "invalid IP"},
		{net.IP{1, 2, 3}, "invalid IP"},
	} {
		if got := FromIP(c.in).String(); got != c.want {
			t.Errorf("FromIP(%v) = %s, want %s", c.in, got, c.want)
		}
	}
}

package netaddr

import (
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

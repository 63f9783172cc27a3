package bgp

import (
	"net/netip"
	"runtime"
	"strings"
	"testing"
)

func TestParsePeer(t *testing.T) {
	for in, want := range map[string]Peer{
		"10.0.0.1:65000":       {Addr: netip.MustParseAddr("10.0.0.1"), ASN: 65000},
		"[fd00::1]:64512":      {Addr: netip.MustParseAddr("fd00::1"), ASN: 64512},
		"10.0.0.1:4200000000":  {Addr: netip.MustParseAddr("10.0.0.1"), ASN: 4200000000},
		"[fd00::1]:64512:1179": {Addr: netip.MustParseAddr("fd00::1"), ASN: 64512, Port: 1179},
	} {
		got, err := ParsePeer(in)
		if err != nil || got != want {
			t.Errorf("ParsePeer(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if got.String() != in {
			t.Errorf("%+v prints %q, want %q", got, got.String(), in)
		}
	}
	for in, want := range map[string]string{
		"10.0.0.1":            "want ADDR:ASN",
		"fd00::1:65000":       `"fd00" is not an IPv4 address (write an IPv6 one in brackets)`,
		"[10.0.0.1]:65000":    `"10.0.0.1" is not an IPv6 address`,
		"[fd00::1:65000":      "no ] after the IPv6 address",
		"[fd00::1]65000":      "want [IPV6]:ASN",
		"10.0.0.1:0":          `ASN "0" is not 1-4294967294`,
		"10.0.0.1:as65000":    `ASN "as65000" is not 1-4294967294`,
		"10.0.0.1:4294967295": `ASN "4294967295" is not 1-4294967294`,
		"10.0.0.1:65000:0":    `port "0" is not 1-65535`,
		"host.example:65000":  `"host.example" is not an IPv4 address`,
	} {
		if _, err := ParsePeer(in); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), in) {
			t.Errorf("ParsePeer(%q) = %v, want an error naming it and containing %q", in, err, want)
		}
	}
	ps, err := ParsePeers(" 10.0.0.1:65000, [fd00::1]:65000 ,")
	if err != nil || len(ps) != 2 {
		t.Errorf("ParsePeers: %v, %v", ps, err)
	}
	if _, err := ParsePeers("10.0.0.1:65000,10.0.0.1:65001"); err == nil || !strings.Contains(err.Error(), "peer 10.0.0.1 is given twice") {
		t.Errorf("a peer twice: %v", err)
	}
}

func TestConfigCheck(t *testing.T) {
	good := Config{ASN: 64513, RouterID: netip.MustParseAddr("10.0.0.11"), Peers: []Peer{{Addr: netip.MustParseAddr("10.0.0.1"), ASN: 64512}},
		NextHop4: netip.MustParseAddr("10.0.0.11")}
	if err := good.Check(); err != nil {
		t.Errorf("good config: %v", err)
	}
	bad := Config{RouterID: netip.MustParseAddr("fd00::11"), NextHop4: netip.MustParseAddr("fd00::11"), NextHop6: netip.MustParseAddr("10.0.0.11")}
	err := bad.Check()
	for _, want := range []string{"no ASN: set --bgp-asn or the node's vmlane.io/bgp-asn annotation", "router ID fd00::11 is not an IPv4 address",
		"no peers: set --bgp-peer or the node's vmlane.io/bgp-peers annotation", "IPv4 next hop fd00::11 is not IPv4", "IPv6 next hop 10.0.0.11 is not IPv6"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bad config: %v, want %q", err, want)
		}
	}
	withPassword := good
	withPassword.Password = "secret"
	if err := withPassword.Check(); (err == nil) != (runtime.GOOS == "linux") {
		t.Errorf("a password on %s: %v", runtime.GOOS, err)
	}
}

func TestSessions(t *testing.T) {
	var s sessions
	s.up, s.why = map[string]bool{}, map[string]string{}
	steps := []struct {
		up   bool
		why  string
		want int
	}{
		{false, "", sessionNoChange},
		{false, "bad peer AS", sessionRefused},
		{false, "bad peer AS", sessionNoChange}, // once per reason in a row
		{true, "", sessionUp},
		{true, "", sessionNoChange},
		{false, "hold timer expired", sessionDown},
		{false, "", sessionNoChange},
		{false, "bad peer AS", sessionRefused}, // reported again after an up
		{true, "", sessionUp},
	}
	for i, st := range steps {
		if got := s.event("10.0.0.1", st.up, st.why); got != st.want {
			t.Errorf("step %d (%+v): %d, want %d", i, st, got, st.want)
		}
	}
	if !s.notifications("p", 1) || s.notifications("p", 1) || !s.notifications("p", 3) {
		t.Error("notifications: want more on 1, none on 1 again, more on 3")
	}
}

// FuzzParsePeers: the annotation of any Node's, read by every vmlaned in
// bgp mode, never panics, and what parses prints back to what parses the
// same.
func FuzzParsePeers(f *testing.F) {
	for _, s := range []string{"10.0.0.1:65000", "[fd00::1]:64512:1179", "10.0.0.1:65000,[fd00::1]:65000", "[", "]:", "1.2.3.4:", ":1", "[::ffff:1.2.3.4]:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := ParsePeers(s)
		if err != nil {
			return
		}
		for _, p := range ps {
			q, err := ParsePeer(p.String())
			if err != nil || q != p {
				t.Fatalf("%q parsed as %+v, which prints %q, which parses as %+v, %v", s, p, p.String(), q, err)
			}
		}
	})
}

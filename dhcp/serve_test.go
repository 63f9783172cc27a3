package dhcp

import (
	"net"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

func TestReplyAddr(t *testing.T) {
	mk := func(mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
		return must[*dhcpv4.DHCPv4](t)(dhcpv4.New(append([]dhcpv4.Modifier{dhcpv4.WithHwAddr(cniMAC)}, mods...)...))
	}
	ack := mk(dhcpv4.WithMessageType(dhcpv4.MessageTypeAck))
	nak := mk(dhcpv4.WithMessageType(dhcpv4.MessageTypeNak))
	for _, tt := range []struct {
		name       string
		req, reply *dhcpv4.DHCPv4
		want       string
	}{
		{"relay", mk(dhcpv4.WithGatewayIP(net.IPv4(10, 0, 0, 1)), dhcpv4.WithClientIP(net.IPv4(10, 98, 0, 50))), ack, "10.0.0.1:67"},
		{"nak broadcast even with ciaddr", mk(dhcpv4.WithClientIP(net.IPv4(10, 98, 0, 50))), nak, "255.255.255.255:68"},
		{"renewing unicast to ciaddr", mk(dhcpv4.WithClientIP(net.IPv4(10, 98, 0, 50))), ack, "10.98.0.50:68"},
		{"broadcast bit", mk(dhcpv4.WithBroadcast(true)), ack, "255.255.255.255:68"},
		{"no broadcast bit: broadcast fallback", mk(), ack, "255.255.255.255:68"},
	} {
		if got := replyAddr(tt.req, tt.reply).String(); got != tt.want {
			t.Errorf("%s: reply to %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestRateLimiter(t *testing.T) {
	r := newRateLimiter(10, 20)
	allow := func(mac net.HardwareAddr, now time.Time) bool {
		ok, _ := r.allow(mac, now)
		return ok
	}
	now := time.Unix(1000, 0)
	n := 0
	for range 100 {
		if allow(cniMAC, now) {
			n++
		}
	}
	if n != 20 {
		t.Errorf("burst let %d through, want 20", n)
	}
	if ok, why := r.allow(cniMAC, now); ok || why != DropRateLimited {
		t.Errorf("over the limit: %v %q, want %q", ok, why, DropRateLimited)
	}
	if !allow(otherMAC, now) {
		t.Error("another MAC was limited by the first one's flood")
	}
	now = now.Add(time.Second)
	n = 0
	for range 100 {
		if allow(cniMAC, now) {
			n++
		}
	}
	if n != 10 {
		t.Errorf("after 1s %d got through, want 10", n)
	}
	allow(cniMAC, now.Add(2*time.Minute)) // sweeps full buckets
	if len(r.buckets) != 1 {
		t.Errorf("sweep left %d buckets, want 1", len(r.buckets))
	}
}

// TestRateLimiterFlood: a million forged chaddrs (a port without
// anti-spoofing) make at most MaxClients buckets, the rest share one, and
// the server as a whole lets GlobalBurst and then GlobalRate a second
// through; a client known before the flood keeps its own bucket.
func TestRateLimiterFlood(t *testing.T) {
	r := newRateLimiter(RateLimit, RateBurst)
	now := time.Unix(1000, 0)
	if ok, _ := r.allow(cniMAC, now); !ok {
		t.Fatal("first packet limited")
	}
	why := map[string]int{}
	mac := make(net.HardwareAddr, 6)
	for i := range 1_000_000 {
		mac[0], mac[3], mac[4], mac[5] = 0x02, byte(i>>16), byte(i>>8), byte(i)
		// A million packets in 10 s.
		ok, w := r.allow(mac, now.Add(time.Duration(i)*10*time.Microsecond))
		if ok {
			w = "allowed"
		}
		why[w]++
	}
	if len(r.buckets) > MaxClients {
		t.Errorf("%d buckets, want at most %d", len(r.buckets), MaxClients)
	}
	// 10 s of a global budget: GlobalBurst + 10 s × GlobalRate at most.
	if got, most := why["allowed"], GlobalBurst+10*GlobalRate; got > most || got == 0 {
		t.Errorf("%d of the flood got through, want 1..%d (%v)", got, most, why)
	}
	if why[DropRateLimitedOverflow] == 0 || why[DropRateLimitedGlobal] == 0 {
		t.Errorf("drops by reason %v: want both the overflow bucket and the global limit to have acted", why)
	}
	// After the flood, the known client still has its own bucket and the
	// global budget refills.
	later := now.Add(20 * time.Second)
	if ok, w := r.allow(cniMAC, later); !ok {
		t.Errorf("a client known before the flood was limited after it: %s", w)
	}
}

func TestPortRoute(t *testing.T) {
	mk := func(mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
		return must[*dhcpv4.DHCPv4](t)(dhcpv4.New(append([]dhcpv4.Modifier{dhcpv4.WithHwAddr(cniMAC)}, mods...)...))
	}
	ack := mk(dhcpv4.WithMessageType(dhcpv4.MessageTypeAck), dhcpv4.WithYourIP(net.IPv4(10, 98, 0, 50)))
	nak := mk(dhcpv4.WithMessageType(dhcpv4.MessageTypeNak))
	for _, tt := range []struct {
		name       string
		req, reply *dhcpv4.DHCPv4
		want       string // "MAC IP", or "" for not through the port
	}{
		{"relay", mk(dhcpv4.WithGatewayIP(net.IPv4(10, 0, 0, 1))), ack, ""},
		{"nak", mk(dhcpv4.WithClientIP(net.IPv4(10, 98, 0, 50))), nak, "ff:ff:ff:ff:ff:ff 255.255.255.255"},
		{"broadcast bit", mk(dhcpv4.WithBroadcast(true)), ack, "ff:ff:ff:ff:ff:ff 255.255.255.255"},
		{"renewing", mk(dhcpv4.WithClientIP(net.IPv4(10, 98, 0, 50))), ack, cniMAC.String() + " 10.98.0.50"},
		{"no address yet", mk(), ack, cniMAC.String() + " 10.98.0.50"},
	} {
		mac, dst, ok := portRoute(tt.req, tt.reply)
		got := ""
		if ok {
			got = mac.String() + " " + dst.String()
		}
		if got != tt.want {
			t.Errorf("%s: through the port to %q, want %q", tt.name, got, tt.want)
		}
	}
}

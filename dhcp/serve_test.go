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
	now := time.Unix(1000, 0)
	n := 0
	for range 100 {
		if r.allow(cniMAC, now) {
			n++
		}
	}
	if n != 20 {
		t.Errorf("burst let %d through, want 20", n)
	}
	if !r.allow(otherMAC, now) {
		t.Error("another MAC was limited by the first one's flood")
	}
	now = now.Add(time.Second)
	n = 0
	for range 100 {
		if r.allow(cniMAC, now) {
			n++
		}
	}
	if n != 10 {
		t.Errorf("after 1s %d got through, want 10", n)
	}
	r.allow(cniMAC, now.Add(2*time.Minute)) // sweeps full buckets
	if len(r.buckets) != 1 {
		t.Errorf("sweep left %d buckets, want 1", len(r.buckets))
	}
}

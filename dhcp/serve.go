package dhcp

import (
	"net"
	"sync"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// Per-MAC rate limit: a guest gets RateBurst packets at once and RateLimit
// a second after that. A DHCP client sends a handful of packets per
// exchange with seconds of backoff (RFC 2131 §4.1), so only a broken or
// hostile guest gets near it.
const (
	RateLimit = 10
	RateBurst = 20
)

// rateLimiter is a token bucket per MAC. Not safe for concurrent use: the
// server's read loop owns it.
type rateLimiter struct {
	rate, burst float64
	buckets     map[[6]byte]*bucket
	lastSweep   time.Time
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newRateLimiter(rate, burst float64) *rateLimiter {
	return &rateLimiter{rate: rate, burst: burst, buckets: map[[6]byte]*bucket{}}
}

// allow takes a token from mac's bucket. Full buckets are swept once a
// minute, so a flood of spoofed MACs costs memory for a minute at most.
func (r *rateLimiter) allow(mac net.HardwareAddr, now time.Time) bool {
	if now.Sub(r.lastSweep) > time.Minute {
		for k, b := range r.buckets {
			if now.Sub(b.last).Seconds()*r.rate >= r.burst {
				delete(r.buckets, k)
			}
		}
		r.lastSweep = now
	}
	var k [6]byte
	copy(k[:], mac)
	b := r.buckets[k]
	if b == nil {
		b = &bucket{tokens: r.burst, last: now}
		r.buckets[k] = b
	}
	b.tokens = min(r.burst, b.tokens+now.Sub(b.last).Seconds()*r.rate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// replyAddr says where a reply goes, per RFC 2131 §4.1 ("If the 'giaddr'
// field ... is nonzero ..."):
//   - through a relay (giaddr set): to giaddr:67;
//   - a DHCPNAK: broadcast;
//   - ciaddr set (RENEWING, REBINDING, INFORM): unicast to ciaddr:68,
//     where the client's stack answers ARP for itself;
//   - otherwise broadcast to 255.255.255.255:68.
//
// The RFC's last case, unicasting to yiaddr and chaddr when the broadcast
// bit is clear, needs a frame sent to a MAC that the kernel has no ARP
// entry for (a raw socket, or an ARP entry set by hand). The socket here is
// a plain UDP one, so those replies are broadcast instead: §4.1 allows the
// server to broadcast when it cannot unicast ("If ... the server cannot
// deliver it, the server SHOULD broadcast"), and every client accepts a
// broadcast reply. On a bridge of VMs the extra copy reaches only the
// bridge's other ports.
func replyAddr(req, reply *dhcpv4.DHCPv4) *net.UDPAddr {
	if gi := addrOf(req.GatewayIPAddr); gi.IsValid() {
		return &net.UDPAddr{IP: ip4(gi), Port: dhcpv4.ServerPort}
	}
	if reply.MessageType() == dhcpv4.MessageTypeNak {
		return &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ClientPort}
	}
	if ci := addrOf(req.ClientIPAddr); ci.IsValid() {
		return &net.UDPAddr{IP: ip4(ci), Port: dhcpv4.ClientPort}
	}
	return &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ClientPort}
}

// macMutex serializes handling per MAC when packets are handled
// concurrently, so one client's retransmissions never race each other
// through lookup-then-bind.
type macMutex struct {
	mu    sync.Mutex
	locks map[[6]byte]*macLock
}

type macLock struct {
	mu   sync.Mutex
	refs int
}

func (m *macMutex) lock(mac net.HardwareAddr) func() {
	var k [6]byte
	copy(k[:], mac)
	m.mu.Lock()
	if m.locks == nil {
		m.locks = map[[6]byte]*macLock{}
	}
	l := m.locks[k]
	if l == nil {
		l = &macLock{}
		m.locks[k] = l
	}
	l.refs++
	m.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		m.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(m.locks, k)
		}
		m.mu.Unlock()
	}
}

package dhcp

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/vmlane/vmlane/internal/rawip"
)

// Rate limits. A client gets RateBurst packets at once and RateLimit a
// second after that; a DHCP client sends a handful of packets per
// exchange with seconds of backoff (RFC 2131 §4.1), so only a broken or
// hostile guest gets near it. The server as a whole takes GlobalRate a
// second (GlobalBurst at once): what a node booting hundreds of VMs at
// once needs, and a bound on what any flood costs.
//
// A client is its chaddr. Anti-spoofing drops every DHCP message whose
// chaddr is not its frame's source MAC, and every frame whose source MAC
// is not its port's, so on checked ports a client is a bridge port. On
// ports without anti-spoofing a guest can send any chaddr; then the
// table of clients stops growing at MaxClients, and clients past it share
// one bucket, so memory stays bounded whatever the flood.
const (
	RateLimit   = 10
	RateBurst   = 20
	GlobalRate  = 1000
	GlobalBurst = 2000
	MaxClients  = 4096
)

// rateLimiter is a token bucket per client, one shared by clients past
// max, and a global one. Safe for concurrent use: the server's read loop
// and its reader of renewals for other servers share it.
type rateLimiter struct {
	mu          sync.Mutex
	rate, burst float64
	max         int
	buckets     map[[6]byte]*bucket
	overflow    bucket
	global      bucket
	globalRate  float64
	globalBurst float64
	lastSweep   time.Time
}

type bucket struct {
	tokens float64
	last   time.Time
}

// take refills b for the time since its last use and takes a token.
func (b *bucket) take(now time.Time, rate, burst float64) bool {
	if b.last.IsZero() {
		b.tokens = burst
	} else {
		b.tokens = min(burst, b.tokens+now.Sub(b.last).Seconds()*rate)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

func newRateLimiter(rate, burst float64) *rateLimiter {
	return &rateLimiter{rate: rate, burst: burst, max: MaxClients, globalRate: GlobalRate, globalBurst: GlobalBurst,
		buckets: map[[6]byte]*bucket{}}
}

// allow takes a token from mac's bucket and one from the global bucket,
// and says why not when it cannot. Full buckets are swept once a minute.
func (r *rateLimiter) allow(mac net.HardwareAddr, now time.Time) (ok bool, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
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
		b = &r.overflow
		if len(r.buckets) < r.max {
			b = &bucket{}
			r.buckets[k] = b
		}
	}
	if !b.take(now, r.rate, r.burst) {
		if b == &r.overflow {
			return false, DropRateLimitedOverflow
		}
		return false, DropRateLimited
	}
	if !r.global.take(now, r.globalRate, r.globalBurst) {
		return false, DropRateLimitedGlobal
	}
	return true, ""
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

// portRoute says where a reply sent out of the client's own bridge port
// goes: the frame's destination MAC and the packet's destination address,
// as RFC 2131 §4.1 has it for a server that can unicast to a client with
// no address yet:
//   - a DHCPNAK, or a request with the broadcast bit: 255.255.255.255 to
//     ff:ff:ff:ff:ff:ff (which only this port receives);
//   - ciaddr set (RENEWING, REBINDING, INFORM): to ciaddr at chaddr;
//   - otherwise: to yiaddr at chaddr.
//
// ok is false for a request through a relay (giaddr set), which goes to
// the relay through the stack.
func portRoute(req, reply *dhcpv4.DHCPv4) (mac net.HardwareAddr, dst netip.Addr, ok bool) {
	if addrOf(req.GatewayIPAddr).IsValid() {
		return nil, netip.Addr{}, false
	}
	bcast := netip.AddrFrom4([4]byte{255, 255, 255, 255})
	if reply.MessageType() == dhcpv4.MessageTypeNak || req.IsBroadcast() {
		return rawip.Broadcast, bcast, true
	}
	if ci := addrOf(req.ClientIPAddr); ci.IsValid() {
		return req.ClientHWAddr, ci, true
	}
	if yi := addrOf(reply.YourIPAddr); yi.IsValid() {
		return req.ClientHWAddr, yi, true
	}
	return rawip.Broadcast, bcast, true
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

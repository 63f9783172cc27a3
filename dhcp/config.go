package dhcp

import (
	"net"
	"net/netip"
	"time"

	"github.com/vmlane/vmlane/leases"
)

// Defaults for the zero values of [Config].
const (
	DefaultLeaseTime  = time.Hour
	DefaultQuarantine = 10 * time.Minute
	// OfferHold is how long a dynamic address stays held for a MAC between
	// OFFER and REQUEST. RFC 2131 §4.3.1 leaves it to the server; a client
	// that has not requested within a minute has gone to another server or
	// retries from DISCOVER.
	OfferHold = time.Minute
)

// Allocator is what the handler needs from the lease store. A method
// that changes a lease returns once the change is durable, and the handler
// replies after it returns, so an ACK never names an address the store
// could lose. An allocator may acknowledge a bind before writing it only
// where the address is already the MAC's on disk and the write adds only
// the binding (StoreAllocator.Defer, for CNI reservations).
// [StoreAllocator] adapts a *leases.Store.
type Allocator interface {
	// Lookup returns the live (not declined) lease of mac. When mac has
	// none but a quarantined (declined) one, it may return that with ok
	// false, so the server can tell why it stays silent.
	Lookup(mac net.HardwareAddr) (leases.Lease, bool, error)
	// Allocate returns mac's lease, or holds a new dynamic (SourceDHCP)
	// address for it from pool until holdUntil: want if it is free and in
	// pool (the client's requested address, RFC 2131 §4.3.1), else the
	// next free one. It fails with leases.ErrExhausted when pool is full.
	Allocate(mac net.HardwareAddr, want netip.Addr, pool leases.Pool, holdUntil time.Time) (leases.Lease, error)
	// Bind marks ip bound to mac until expires (leases.Tx.Bind). It fails
	// with leases.ErrConflict or leases.ErrNotFound when ip is not mac's.
	Bind(mac net.HardwareAddr, ip netip.Addr, expires time.Time, hostname string) (leases.Lease, error)
	// Release handles DHCPRELEASE (leases.Tx.ReleaseMAC).
	Release(mac net.HardwareAddr) (leases.Lease, bool, error)
	// Decline quarantines ip, declined by mac, until until
	// (leases.Tx.Decline).
	Decline(mac net.HardwareAddr, ip netip.Addr, until time.Time) (leases.Lease, error)
}

// Route is a classless static route served in option 121.
type Route struct {
	Dest netip.Prefix
	Via  netip.Addr
}

// Config is what the server hands out besides addresses.
type Config struct {
	// ServerIP is the server identifier (option 54): the bridge's address.
	ServerIP netip.Addr
	// Subnet is the bridge subnet; it gives the mask (1) and broadcast (28).
	Subnet netip.Prefix
	// Router is the default gateway (3, and the default route in 121);
	// zero serves no router.
	Router netip.Addr
	DNS    []netip.Addr
	Domain string
	Search []string
	// MTU is the interface MTU (26); 0 leaves it out.
	MTU int
	// LeaseTime is option 51; zero means DefaultLeaseTime.
	LeaseTime time.Duration
	// Quarantine is how long a declined address stays unused; zero means
	// DefaultQuarantine.
	Quarantine time.Duration
	// DynamicRange, if set, serves MACs without a CNI reservation from it;
	// nil serves CNI reservations only.
	DynamicRange *leases.Pool
	// Routes are extra classless static routes, sent before the default
	// route.
	Routes []Route
	// Hostname picks the name served in option 12 for a lease; it is made
	// a valid DNS label. Nil uses the pod name, else the lease's hostname.
	Hostname func(leases.Lease) string
}

package leases

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/vmlane/vmlane/internal/netaddr"
)

// Pool is an inclusive range of addresses to allocate from.
type Pool struct {
	First, Last netip.Addr
}

func (p Pool) contains(a netip.Addr) bool {
	return p.First.Compare(a) <= 0 && a.Compare(p.Last) <= 0
}

// excludes reports whether a is in p as an exclusion: the zero Pool
// excludes nothing.
func (p Pool) excludes(a netip.Addr) bool { return p.First.IsValid() && p.contains(a) }

func (p Pool) String() string { return p.First.String() + "-" + p.Last.String() }

// poolOf is the subnet without its network address and, for IPv4, its
// broadcast address. (RFC 4291 §2.6.1 reserves the IPv6 all-zero host as the
// subnet-router anycast address, so it is skipped for IPv6 too.)
func poolOf(subnet netip.Prefix) Pool {
	first := subnet.Addr().Next()
	last := netaddr.LastAddr(subnet)
	if subnet.Addr().Is4() {
		last = last.Prev()
	}
	if !first.IsValid() || !last.IsValid() || last.Less(first) {
		// /31, /32, /128: no usable address; First==Last makes
		// checkSubnet reject it.
		return Pool{First: subnet.Addr(), Last: subnet.Addr()}
	}
	return Pool{First: first, Last: last}
}

// ParsePool parses "FIRST-LAST" and checks it lies in the subnet's usable
// addresses.
func ParsePool(s string, subnet netip.Prefix) (Pool, error) {
	var p Pool
	first, last, ok := strings.Cut(s, "-")
	if !ok {
		return p, fmt.Errorf("range %q: want FIRST-LAST", s)
	}
	var err error
	if p.First, err = netip.ParseAddr(first); err != nil {
		return p, fmt.Errorf("range %q: %w", s, err)
	}
	if p.Last, err = netip.ParseAddr(last); err != nil {
		return p, fmt.Errorf("range %q: %w", s, err)
	}
	if p.Last.Less(p.First) {
		return p, fmt.Errorf("range %q: last address is before first", s)
	}
	all := poolOf(subnet)
	if !all.contains(p.First) || !all.contains(p.Last) {
		return p, fmt.Errorf("range %q is not inside the usable addresses of %s (%s)", s, subnet, all)
	}
	return p, nil
}

// allocate picks the first free address of pool after the cursor, wrapping
// around: round-robin, as host-local does, so an address that was just
// released is handed out again only once every other one has been. Peers'
// ARP caches and conntrack entries still pointing at the old holder then
// have time to age out before the address means someone else.
//
// held reports addresses taken by leases or the gateway, at most count of
// them; exclude (if valid) is skipped in one jump. A free address is then
// found within count+1 probes when one exists, so the loop stays short even
// in an IPv6 /64.
func allocate(pool Pool, cursor netip.Addr, exclude Pool, held func(netip.Addr) bool, count int) (netip.Addr, bool) {
	hasExcl := exclude.First.IsValid()
	if hasExcl && exclude.First.Compare(pool.First) <= 0 && pool.Last.Compare(exclude.Last) <= 0 {
		return netip.Addr{}, false // the whole pool is excluded
	}
	next := func(a netip.Addr) netip.Addr {
		if a == pool.Last {
			return pool.First
		}
		return a.Next()
	}
	skip := func(a netip.Addr) netip.Addr {
		if exclude.excludes(a) {
			return next(exclude.Last)
		}
		return a
	}
	start := pool.First
	if cursor.IsValid() && pool.contains(cursor) {
		start = next(cursor)
	}
	start = skip(start)
	a := start
	for range count + 1 {
		if !held(a) {
			return a, true
		}
		if a = skip(next(a)); a == start {
			return netip.Addr{}, false
		}
	}
	return netip.Addr{}, false
}

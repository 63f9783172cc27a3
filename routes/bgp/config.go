// Package bgp is vmlaned's BGP speaker for --cross-subnet=bgp: it peers
// with the fabric's routers and announces its node's pod subnets, and the
// /32 and /128 of the VMs that moved to the node (VM identity), so that
// the routers route between nodes that share no subnet, as Calico,
// kube-router and MetalLB do. It is GoBGP (github.com/osrg/gobgp/v4) as a
// library.
//
// What it does and does not do:
//   - It learns nothing: every path a router sends is rejected on import,
//     and nothing is installed in the kernel (the fabric does the routing).
//   - It never listens on TCP port 179 (a node may run another speaker):
//     it connects to its peers.
//   - Graceful restart (RFC 4724) for both families: when vmlaned stops or
//     dies, its peers keep the node's routes as stale for RestartTime, and
//     the next vmlaned comes up with the Restart State and Forwarding State
//     bits set, so no route is withdrawn and no packet lost across a
//     restart.
//   - Session changes are logged and reported as Events on the Node, and
//     counted (vmlane_bgp_session_flaps_total, vmlane_bgp_session_up).
//
// The pure parts (peer and annotation parsing, the paths of a prefix, the
// session bookkeeping) are tested without a network; Speaker is tested
// against a second GoBGP on loopback, and the e2e suite against Debian's
// bird2.
package bgp

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Node annotations that configure a node's BGP on their own, over the
// flags: the node's ASN, and its peers as --bgp-peer takes them, comma
// separated.
const (
	AnnotationASN   = "vmlane.io/bgp-asn"
	AnnotationPeers = "vmlane.io/bgp-peers"
)

// DefaultRestartTime is how long peers keep this node's routes after its
// session goes (graceful restart): long enough for a DaemonSet pod to be
// restarted or rolled, and short enough that a node gone for good is
// forgotten within minutes.
const DefaultRestartTime = 120 * time.Second

// DefaultMaxPrefixes is how many prefixes of a family a peer may send
// (vmlaned --bgp-max-prefixes). The speaker learns nothing, but GoBGP keeps
// what a peer sends (its Adj-RIB-In) before the import policy rejects it:
// without a limit, a router (or anyone on the path of a session without
// MD5) could grow vmlaned's memory without bound. A fabric router sends a
// node a default route or nothing; a thousand leaves room for a router
// that sends its connected subnets.
const DefaultMaxPrefixes = 1000

// Peer is a BGP neighbour: a router of the fabric.
type Peer struct {
	Addr netip.Addr
	ASN  uint32
	// Port is the peer's TCP port (179 when 0).
	Port uint16
}

// String prints p as ParsePeer reads it.
func (p Peer) String() string {
	s := netip.AddrPortFrom(p.Addr, 0).String()
	s = s[:strings.LastIndexByte(s, ':')]
	s += ":" + strconv.FormatUint(uint64(p.ASN), 10)
	if p.Port != 0 {
		s += ":" + strconv.Itoa(int(p.Port))
	}
	return s
}

// ParsePeer reads ADDR:ASN, [IPV6]:ASN, or either with :PORT after the
// ASN.
func ParsePeer(s string) (Peer, error) {
	var p Peer
	rest := s
	if strings.HasPrefix(rest, "[") {
		end := strings.Index(rest, "]")
		if end < 0 {
			return p, fmt.Errorf("peer %q: no ] after the IPv6 address", s)
		}
		a, err := netip.ParseAddr(rest[1:end])
		if err != nil || !a.Is6() {
			return p, fmt.Errorf("peer %q: %q is not an IPv6 address", s, rest[1:end])
		}
		p.Addr, rest = a, rest[end+1:]
		if !strings.HasPrefix(rest, ":") {
			return p, fmt.Errorf("peer %q: want [IPV6]:ASN", s)
		}
		rest = rest[1:]
	} else {
		addr, r, ok := strings.Cut(rest, ":")
		if !ok {
			return p, fmt.Errorf("peer %q: want ADDR:ASN", s)
		}
		a, err := netip.ParseAddr(addr)
		if err != nil || !a.Is4() {
			return p, fmt.Errorf("peer %q: %q is not an IPv4 address (write an IPv6 one in brackets)", s, addr)
		}
		p.Addr, rest = a, r
	}
	asn, port, hasPort := strings.Cut(rest, ":")
	var err error
	if p.ASN, err = ParseASN(asn); err != nil {
		return p, fmt.Errorf("peer %q: %w", s, err)
	}
	if hasPort {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 {
			return p, fmt.Errorf("peer %q: port %q is not 1-65535", s, port)
		}
		p.Port = uint16(n)
	}
	return p, nil
}

// ParsePeers reads a comma-separated list of peers (AnnotationPeers).
func ParsePeers(s string) ([]Peer, error) {
	var out []Peer
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := ParsePeer(f)
		if err != nil {
			return nil, err
		}
		for _, q := range out {
			if q.Addr == p.Addr {
				return nil, fmt.Errorf("peer %s is given twice", p.Addr)
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// ParseASN reads an AS number, 1-4294967294 (0 and 4294967295 are
// reserved, RFC 7607 and RFC 7300).
func ParseASN(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 0 || n == 1<<32-1 {
		return 0, fmt.Errorf("ASN %q is not 1-4294967294", s)
	}
	return uint32(n), nil
}

// Config is one node's speaker.
type Config struct {
	// ASN is this node's AS number.
	ASN uint32
	// RouterID is the BGP identifier: an IPv4 address, unique among the
	// peers' neighbours (the node's IPv4 address).
	RouterID netip.Addr
	Peers    []Peer
	// Password is the TCP MD5 signature key of every session (RFC 2385),
	// empty for none.
	Password string
	// NextHop4 and NextHop6 are the next hops of the node's IPv4 and IPv6
	// prefixes: its addresses of each family. A prefix of a family
	// without one is not announced.
	NextHop4, NextHop6 netip.Addr
	// RestartTime is the graceful restart time (DefaultRestartTime when
	// 0).
	RestartTime time.Duration
	// MaxPrefixes is how many prefixes of each family a peer may send;
	// one more ends the session with a Cease NOTIFICATION (Maximum Number
	// of Prefixes Reached, RFC 4486), and the speaker connects again
	// after its idle hold time, to be cut again while the peer keeps
	// sending as many. 0 is no limit.
	MaxPrefixes uint32
}

// Check says what is wrong with c, naming the setting and the value.
func (c Config) Check() error {
	var errs []error
	if c.ASN == 0 {
		errs = append(errs, errors.New("no ASN: set --bgp-asn or the node's "+AnnotationASN+" annotation"))
	}
	if !c.RouterID.IsValid() {
		errs = append(errs, errors.New("no router ID: the node has no IPv4 address; set --bgp-router-id"))
	} else if !c.RouterID.Is4() {
		errs = append(errs, fmt.Errorf("router ID %s is not an IPv4 address", c.RouterID))
	}
	if len(c.Peers) == 0 {
		errs = append(errs, errors.New("no peers: set --bgp-peer or the node's "+AnnotationPeers+" annotation"))
	}
	if c.Password != "" && runtime.GOOS != "linux" {
		// GoBGP sets TCP_MD5SIG on Linux only; elsewhere it would go
		// unsigned without a word.
		errs = append(errs, fmt.Errorf("a BGP password needs TCP MD5 signatures, which vmlaned sets on Linux only, not on %s", runtime.GOOS))
	}
	if c.NextHop4.IsValid() && !c.NextHop4.Is4() {
		errs = append(errs, fmt.Errorf("IPv4 next hop %s is not IPv4", c.NextHop4))
	}
	if c.NextHop6.IsValid() && !c.NextHop6.Is6() {
		errs = append(errs, fmt.Errorf("IPv6 next hop %s is not IPv6", c.NextHop6))
	}
	return errors.Join(errs...)
}

// Package ra builds and sends the IPv6 router advertisements of a
// dual-stack node bridge (RFC 4861 §6.2): the bridge is the VMs' default
// router, its prefix is on-link with no autonomous flag (no SLAAC address
// a guest would make up), and the managed flag sends guests to DHCPv6 for
// their address, the one the lease store reserved. Advertisements go to
// all-nodes periodically and in answer to router solicitations; the last
// one, when the node stops, has router lifetime 0.
package ra

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"
)

// Defaults of Config (RFC 4861 §6.2.1 and §10).
const (
	DefaultRouterLifetime = 1800 * time.Second
	DefaultInterval       = 200 * time.Second
	// MinDelayBetweenRAs is MIN_DELAY_BETWEEN_RAS: answers to
	// solicitations are at most this often.
	MinDelayBetweenRAs = 3 * time.Second
	// maxInitialInterval is MAX_INITIAL_RTR_ADVERT_INTERVAL, for the
	// first maxInitialAdverts advertisements.
	maxInitialInterval = 16 * time.Second
	maxInitialAdverts  = 3
	// The prefix's lifetimes: a day valid, four hours preferred.
	prefixValid     = 24 * time.Hour
	prefixPreferred = 4 * time.Hour
)

// Config is what the bridge advertises.
type Config struct {
	// Iface is the bridge.
	Iface string
	// Prefix is the node's IPv6 pod subnet, advertised on-link (L=1) and
	// not autonomous (A=0).
	Prefix netip.Prefix
	// MTU, when not 0, is advertised in an MTU option.
	MTU int
	// RouterLifetime is how long guests keep the bridge as their default
	// router; DefaultRouterLifetime when 0.
	RouterLifetime time.Duration
	// Interval is the period of unsolicited advertisements;
	// DefaultInterval when 0.
	Interval time.Duration
	// DNS and Search, when set, go in RDNSS and DNSSL options (RFC 8106)
	// with a lifetime of three intervals.
	DNS    []netip.Addr
	Search []string
}

// withDefaults checks c and fills in its defaults; errors name the field.
func (c Config) withDefaults() (Config, error) {
	switch {
	case c.Iface == "":
		return c, errors.New("ra: Iface is empty")
	case !c.Prefix.IsValid() || !c.Prefix.Addr().Is6() || c.Prefix.Addr().Is4In6():
		return c, fmt.Errorf("ra: Prefix %v is not an IPv6 prefix", c.Prefix)
	case c.Prefix != c.Prefix.Masked():
		return c, fmt.Errorf("ra: Prefix %s has host bits set", c.Prefix)
	case c.MTU != 0 && (c.MTU < 1280 || c.MTU > 65535):
		return c, fmt.Errorf("ra: MTU %d is outside 1280..65535", c.MTU)
	case c.RouterLifetime < 0 || c.RouterLifetime > 9000*time.Second:
		return c, fmt.Errorf("ra: RouterLifetime %s is outside 0..9000s", c.RouterLifetime)
	case c.Interval < 0:
		return c, fmt.Errorf("ra: Interval %s is negative", c.Interval)
	}
	for _, d := range c.DNS {
		if !d.Is6() || d.Is4In6() {
			return c, fmt.Errorf("ra: DNS server %s is not IPv6", d)
		}
	}
	if c.RouterLifetime == 0 {
		c.RouterLifetime = DefaultRouterLifetime
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if _, err := domains(c.Search); err != nil {
		return c, err
	}
	return c, nil
}

// ICMPv6 types and option types.
const (
	typeRouterSolicit = 133
	typeRouterAdvert  = 134

	optSourceLinkAddr = 1
	optPrefixInfo     = 3
	optMTU            = 5
	optRDNSS          = 25
	optDNSSL          = 31
)

// Build returns the ICMPv6 message of an advertisement of c from a router
// whose MAC is srcMAC, with router lifetime lifetime (0: "not a default
// router", as in the last advertisement). The checksum is left 0: the
// kernel fills it in on a raw ICMPv6 socket.
func Build(c Config, srcMAC net.HardwareAddr, lifetime time.Duration) ([]byte, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	if len(srcMAC) != 6 {
		return nil, fmt.Errorf("ra: source MAC %q is not a 48-bit MAC", srcMAC)
	}
	b := make([]byte, 16, 128)
	b[0] = typeRouterAdvert
	b[4] = 64          // cur hop limit
	b[5] = 0x80 | 0x40 // M (managed: DHCPv6 addresses), O (other configuration)
	binary.BigEndian.PutUint16(b[6:], uint16(lifetime/time.Second))
	// reachable time and retrans timer: 0, unspecified

	b = append(b, optSourceLinkAddr, 1)
	b = append(b, srcMAC...)
	if c.MTU != 0 {
		b = append(b, optMTU, 1, 0, 0)
		b = binary.BigEndian.AppendUint32(b, uint32(c.MTU))
	}
	b = append(b, optPrefixInfo, 4, byte(c.Prefix.Bits()), 0x80) // L=1, A=0
	b = binary.BigEndian.AppendUint32(b, uint32(prefixValid/time.Second))
	b = binary.BigEndian.AppendUint32(b, uint32(prefixPreferred/time.Second))
	b = append(b, 0, 0, 0, 0)
	p := c.Prefix.Addr().As16()
	b = append(b, p[:]...)
	dnsLifetime := uint32(3 * c.Interval / time.Second)
	if len(c.DNS) > 0 {
		b = append(b, optRDNSS, byte(1+2*len(c.DNS)), 0, 0)
		b = binary.BigEndian.AppendUint32(b, dnsLifetime)
		for _, d := range c.DNS {
			a := d.As16()
			b = append(b, a[:]...)
		}
	}
	if len(c.Search) > 0 {
		names, _ := domains(c.Search) // checked by withDefaults
		n := 8 + len(names)
		pad := (8 - n%8) % 8
		b = append(b, optDNSSL, byte((n+pad)/8), 0, 0)
		b = binary.BigEndian.AppendUint32(b, dnsLifetime)
		b = append(b, names...)
		b = append(b, make([]byte, pad)...)
	}
	return b, nil
}

// domains encodes names as RFC 1035 labels, one after another.
func domains(names []string) ([]byte, error) {
	var b []byte
	for _, n := range names {
		n = strings.TrimSuffix(n, ".")
		if n == "" {
			return nil, errors.New("ra: empty search domain")
		}
		for _, label := range strings.Split(n, ".") {
			if label == "" || len(label) > 63 {
				return nil, fmt.Errorf("ra: search domain %q has a label that is empty or longer than 63 bytes", n)
			}
			b = append(b, byte(len(label)))
			b = append(b, label...)
		}
		b = append(b, 0)
	}
	return b, nil
}

// isSolicit reports whether an ICMPv6 message is a router solicitation
// (RFC 4861 §6.1.1: code 0, at least 8 bytes).
func isSolicit(b []byte) bool {
	return len(b) >= 8 && b[0] == typeRouterSolicit && b[1] == 0
}

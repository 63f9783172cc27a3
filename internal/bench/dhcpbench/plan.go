package main

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// reservation is one VM NIC both servers know: a MAC, its reserved
// address, and its pod's name, which both serve as the hostname.
type reservation struct {
	mac  net.HardwareAddr
	ip   netip.Addr
	ip6  netip.Addr // in plan.subnet6
	name string
}

// plan is the address set of a run: the subnet, its gateway (the bridge's
// address and both servers' identifier), and the reservations, split into
// the warm-up ones (bound again every round) and the timed ones (each
// used by one timed exchange per server and level).
type plan struct {
	subnet  netip.Prefix
	gateway netip.Addr
	// subnet6 is the IPv6 side, which the DHCPv6 run (-family 6) serves.
	subnet6 netip.Prefix
	warm    []reservation
	timed   []reservation
}

// firstHost is the offset of the first reserved address in the subnet:
// .1 is the gateway, and a few addresses stay free below the reservations
// as on a real node.
const firstHost = 10

// newPlan reserves warm+timed addresses in base, widened from /22 as far
// as it takes (a /22 is a dense node: 1,021 VM NICs). MACs are locally
// administered, 02:62:6e:00:HH:LL, and pods are vm-NNNNN.
func newPlan(base netip.Addr, warm, timed int) (plan, error) {
	need := firstHost + warm + timed + 1 // + the broadcast address
	if warm < 1 || timed < 1 || need > 1<<16 {
		return plan{}, fmt.Errorf("cannot reserve %d warm-up and %d timed addresses in one subnet (at most %d in all)", warm, timed, 1<<16-firstHost-1)
	}
	bits := 22
	for 1<<(32-bits) < need {
		bits--
	}
	p := plan{subnet: netip.PrefixFrom(base, bits).Masked(), subnet6: subnet6}
	p.gateway = p.subnet.Addr().Next()
	ip6 := subnet6.Addr()
	for range firstHost {
		ip6 = ip6.Next()
	}
	ip := p.subnet.Addr()
	for range firstHost {
		ip = ip.Next()
	}
	for i := range warm + timed {
		r := reservation{
			mac:  net.HardwareAddr{0x02, 0x62, 0x6e, 0x00, byte(i >> 8), byte(i)},
			ip:   ip,
			ip6:  ip6,
			name: fmt.Sprintf("vm-%05d", i),
		}
		if i < warm {
			p.warm = append(p.warm, r)
		} else {
			p.timed = append(p.timed, r)
		}
		ip, ip6 = ip.Next(), ip6.Next()
	}
	return p, nil
}

// subnet6 is the IPv6 subnet of every plan, the reservations' ip6.
var subnet6 = netip.MustParsePrefix("fd00:252::/64")

// dnsmasqHosts is the plan as a --dhcp-hostsfile: MAC,IP,[IP6],hostname
// per line, the same reservations and hostnames vmlaned serves (dnsmasq
// finds a DHCPv6 client's MAC in its DUID-LL).
func (p plan) dnsmasqHosts() string {
	var b strings.Builder
	for _, rs := range [][]reservation{p.warm, p.timed} {
		for _, r := range rs {
			fmt.Fprintf(&b, "%s,%s,[%s],%s\n", r.mac, r.ip, r.ip6, r.name)
		}
	}
	return b.String()
}

// parseLevels reads -levels: a comma-separated list of positive counts of
// clients in flight.
func parseLevels(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("invalid level %q: want a positive number of clients in flight", f)
		}
		out = append(out, n)
	}
	return out, nil
}

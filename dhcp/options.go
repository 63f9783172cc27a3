package dhcp

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/rfc1035label"
	"github.com/vmlane/vmlane/internal/netaddr"
	"github.com/vmlane/vmlane/leases"
)

// ack builds an OFFER or ACK for lease l. withLease false is the reply to
// an INFORM: options only, no yiaddr and no lease times (RFC 2131 §4.3.5,
// table 3).
func (h *Handler) ack(req *dhcpv4.DHCPv4, mt dhcpv4.MessageType, l leases.Lease, withLease bool) (*dhcpv4.DHCPv4, error) {
	mods := []dhcpv4.Modifier{dhcpv4.WithMessageType(mt)}
	for _, o := range h.options(l, withLease) {
		mods = append(mods, dhcpv4.WithOption(o))
	}
	r, err := dhcpv4.NewReplyFromRequest(req, mods...)
	if err != nil {
		return nil, err
	}
	if withLease {
		r.YourIPAddr = ip4(l.IP)
	}
	// Table 3: ciaddr is echoed for RENEWING/REBINDING and INFORM, which
	// also tells the socket layer to unicast the reply there.
	if mt == dhcpv4.MessageTypeAck && addrOf(req.ClientIPAddr).IsValid() {
		r.ClientIPAddr = req.ClientIPAddr.To4()
	}
	return r, nil
}

// options is the option set of an OFFER or ACK. Every address is 4 bytes
// (the dhcpv4 option types write To4()).
//
// A lease that moved in from another node's subnet (a VM with VM identity
// whose pod came here) gets that subnet and its gateway, as at home: the
// bridge answers ARP for the gateway and the neighbours it routes
// elsewhere (proxy ARP), so the guest's view of its network is the same
// on every node, before and after a live migration.
func (h *Handler) options(l leases.Lease, withLease bool) []dhcpv4.Option {
	c := &h.cfg
	subnet, router := c.Subnet, c.Router
	if l.Home.IsValid() && l.Home.Addr().Is4() {
		subnet, router = l.Home, l.Home.Addr().Next()
	}
	opts := []dhcpv4.Option{
		dhcpv4.OptServerIdentifier(ip4(c.ServerIP)),
		dhcpv4.OptSubnetMask(net.CIDRMask(subnet.Bits(), 32)),
		dhcpv4.OptBroadcastAddress(ip4(netaddr.LastAddr(subnet))),
	}
	if router.IsValid() {
		opts = append(opts, dhcpv4.OptRouter(ip4(router)))
	}
	if len(c.DNS) > 0 {
		ips := make([]net.IP, len(c.DNS))
		for i, d := range c.DNS {
			ips[i] = ip4(d)
		}
		opts = append(opts, dhcpv4.OptDNS(ips...))
	}
	if c.Domain != "" {
		opts = append(opts, dhcpv4.OptDomainName(c.Domain))
	}
	if len(c.Search) > 0 {
		opts = append(opts, dhcpv4.OptDomainSearch(&rfc1035label.Labels{Labels: c.Search}))
	}
	if c.MTU > 0 {
		opts = append(opts, dhcpv4.OptGeneric(dhcpv4.OptionInterfaceMTU, binary.BigEndian.AppendUint16(nil, uint16(c.MTU))))
	}
	if routes := h.routes(router); len(routes) > 0 {
		opts = append(opts, dhcpv4.OptGeneric(dhcpv4.OptionClasslessStaticRoute, routes))
	}
	if l.IP.IsValid() {
		if name := hostnameLabel(c.Hostname(l)); name != "" {
			opts = append(opts, dhcpv4.OptHostName(name))
		}
	}
	if withLease {
		opts = append(opts,
			dhcpv4.OptIPAddressLeaseTime(c.LeaseTime),
			// RFC 2131 §4.4.5 defaults: T1 = 0.5, T2 = 0.875 of the lease.
			dhcpv4.OptRenewTimeValue(c.LeaseTime/2),
			dhcpv4.OptRebindingTimeValue(c.LeaseTime*7/8),
		)
	}
	return opts
}

// routes encodes option 121 (RFC 3442 §3): each route is the prefix
// length, the significant octets of the destination, then the router. The
// extra routes come first and the default route last: RFC 3442 says a client
// that receives 121 ignores option 3, so the default route must be in 121
// too, and clients that install routes in order then never briefly route
// everything through the gateway before the specific routes exist.
func (h *Handler) routes(router netip.Addr) []byte {
	var b []byte
	add := func(dst netip.Prefix, via netip.Addr) {
		dst = dst.Masked()
		a := dst.Addr().As4()
		v := via.As4()
		b = append(b, byte(dst.Bits()))
		b = append(b, a[:(dst.Bits()+7)/8]...)
		b = append(b, v[:]...)
	}
	for _, r := range h.cfg.Routes {
		if r.Dest.Bits() != 0 {
			add(r.Dest, r.Via)
		}
	}
	if router.IsValid() {
		add(netip.PrefixFrom(netip.IPv4Unspecified(), 0), router)
	}
	return b
}

// hostnameLabel makes s a valid DNS label (RFC 1123 §2.1, as Kubernetes
// DNS-1123 labels): lowercase letters, digits and '-', no '-' at either end,
// at most 63 octets. Other characters (dots of a pod name that is a
// subdomain, underscores) become '-'. Guests feed option 12 to sethostname
// and to DHCP-updated DNS, which reject anything else.
func hostnameLabel(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	out := strings.Trim(b.String(), "-")
	if len(out) > 63 {
		out = strings.TrimRight(out[:63], "-")
	}
	return out
}

// searchBytes checks that the search list encodes as RFC 1035 names
// (RFC 3397): each label 1..63 octets, the whole option at most 255.
func searchBytes(search []string) ([]byte, error) {
	if len(search) == 0 {
		return nil, nil
	}
	for _, d := range search {
		for _, lab := range strings.Split(strings.TrimSuffix(d, "."), ".") {
			if len(lab) == 0 || len(lab) > 63 {
				return nil, fmt.Errorf("dhcp: search domain %q has an empty or over-long label", d)
			}
		}
	}
	b := (&rfc1035label.Labels{Labels: search}).ToBytes()
	if len(b) > 255 {
		return nil, fmt.Errorf("dhcp: search list encodes to %d bytes, more than one option holds (255)", len(b))
	}
	return b, nil
}

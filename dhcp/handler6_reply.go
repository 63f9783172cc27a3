package dhcp

// The building blocks of Handler6's replies: the IA options, the DNS
// options, the message around them, and the drop bookkeeping.

import (
	"net"
	"net/netip"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
)

// noAddrs is the answer to a SOLICIT or REQUEST with no IA_NA (RFC 8415
// §18.3.1): NoAddrsAvail, and each IA_PD with NoPrefixAvail.
func (h *Handler6) noAddrs(req *dhcpv6.Message) []dhcpv6.Option {
	return append(h.iapds(req, iana.StatusNoPrefixAvail),
		&dhcpv6.OptStatusCode{StatusCode: iana.StatusNoAddrsAvail, StatusMessage: "only IA_NA addresses are served"})
}

// iapds answers each of the client's IA_PDs with code: this server
// delegates no prefixes.
func (h *Handler6) iapds(req *dhcpv6.Message, code iana.StatusCode) []dhcpv6.Option {
	var out []dhcpv6.Option
	for _, pd := range req.Options.IAPD() {
		o := &dhcpv6.OptIAPD{IaId: pd.IaId}
		o.Options.Add(&dhcpv6.OptStatusCode{StatusCode: code, StatusMessage: "no prefix delegation"})
		out = append(out, o)
	}
	return out
}

// ended is a RELEASE's or DECLINE's reply: NoBinding in each IA_NA that
// does not list ip6 (or all of them, when the client has no address),
// then Success.
func (h *Handler6) ended(req *dhcpv6.Message, ip6 netip.Addr, ok bool) []dhcpv6.Option {
	var out []dhcpv6.Option
	for _, ia := range req.Options.IANA() {
		mine := false
		for _, a := range ia.Options.Addresses() {
			if got, valid := netip.AddrFromSlice(a.IPv6Addr); valid && ok && got == ip6 {
				mine = true
			}
		}
		if !mine {
			o := &dhcpv6.OptIANA{IaId: ia.IaId}
			o.Options.Add(&dhcpv6.OptStatusCode{StatusCode: iana.StatusNoBinding, StatusMessage: "no binding for this IA"})
			out = append(out, o)
		}
	}
	return append(out, &dhcpv6.OptStatusCode{StatusCode: iana.StatusSuccess})
}

// lists reports whether one of req's IA_NAs names ip6.
func (h *Handler6) lists(req *dhcpv6.Message, ip6 netip.Addr) bool {
	for _, ia := range req.Options.IANA() {
		for _, a := range ia.Options.Addresses() {
			if got, ok := netip.AddrFromSlice(a.IPv6Addr); ok && got == ip6 {
				return true
			}
		}
	}
	return false
}

// ianas answers the client's IA_NAs: the first gets ip6 and the lease's
// lifetimes, the others NoAddrsAvail (one address per attachment), and
// any other address a client lists comes back with lifetimes 0.
func (h *Handler6) ianas(req *dhcpv6.Message, ip6 netip.Addr) []dhcpv6.Option {
	lt := h.cfg.LeaseTime
	var out []dhcpv6.Option
	for i, ia := range req.Options.IANA() {
		o := &dhcpv6.OptIANA{IaId: ia.IaId}
		if i == 0 {
			o.T1, o.T2 = lt/2, lt*4/5
			o.Options.Add(&dhcpv6.OptIAAddress{IPv6Addr: ip6.AsSlice(), PreferredLifetime: lt, ValidLifetime: lt})
		} else {
			o.Options.Add(&dhcpv6.OptStatusCode{StatusCode: iana.StatusNoAddrsAvail, StatusMessage: "one address per attachment"})
		}
		for _, a := range ia.Options.Addresses() {
			if got, ok := netip.AddrFromSlice(a.IPv6Addr); !ok || got != ip6 || i > 0 {
				o.Options.Add(&dhcpv6.OptIAAddress{IPv6Addr: a.IPv6Addr})
			}
		}
		out = append(out, o)
	}
	return out
}

func (h *Handler6) dnsOptions() []dhcpv6.Option {
	var out []dhcpv6.Option
	if len(h.cfg.DNS) > 0 {
		ips := make([]net.IP, len(h.cfg.DNS))
		for i, d := range h.cfg.DNS {
			ips[i] = d.AsSlice()
		}
		out = append(out, dhcpv6.OptDNS(ips...))
	}
	if len(h.cfg.Search) > 0 {
		b, _ := searchBytes(h.cfg.Search) // checked by NewHandler6
		out = append(out, &dhcpv6.OptionGeneric{OptionCode: dhcpv6.OptionDomainSearchList, OptionData: b})
	}
	return out
}

// reply is a REPLY to req with opts.
func (h *Handler6) reply(req *dhcpv6.Message, opts ...dhcpv6.Option) *dhcpv6.Message {
	return h.message(req, dhcpv6.MessageTypeReply, opts...)
}

// message is a message of type t answering req: its transaction ID, its
// client identifier (if any), our server identifier, then opts.
func (h *Handler6) message(req *dhcpv6.Message, t dhcpv6.MessageType, opts ...dhcpv6.Option) *dhcpv6.Message {
	m := &dhcpv6.Message{MessageType: t, TransactionID: req.TransactionID}
	if cid := req.GetOneOption(dhcpv6.OptionClientID); cid != nil {
		m.AddOption(cid)
	}
	m.AddOption(dhcpv6.OptServerID(h.duid))
	for _, o := range opts {
		m.AddOption(o)
	}
	return m
}

func (h *Handler6) request(t dhcpv6.MessageType) {
	if h.Hooks.Request != nil {
		h.Hooks.Request(t.String())
	}
}

func (h *Handler6) drop(reason string) {
	if h.Hooks.Drop != nil {
		h.Hooks.Drop(reason)
	}
}

func (h *Handler6) dropped(reason string, t dhcpv6.MessageType, mac net.HardwareAddr, msg string) (*dhcpv6.Message, error) {
	h.drop(reason)
	h.log.Debug("dropped", "type", t, "mac", mac.String(), "reason", reason, "why", msg)
	return nil, nil
}

// dropped3 is dropped for handle's three results.
func (h *Handler6) dropped3(reason string, t dhcpv6.MessageType, mac net.HardwareAddr, msg string) (*dhcpv6.Message, func() error, error) {
	r, err := h.dropped(reason, t, mac, msg)
	return r, nil, err
}

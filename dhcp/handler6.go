package dhcp

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/vmlane/vmlane/leases"
)

// Config6 is what the DHCPv6 server hands out besides addresses.
type Config6 struct {
	// Subnet6 is the bridge's IPv6 subnet: CONFIRM checks addresses
	// against it.
	Subnet6 netip.Prefix
	// ServerMAC names the server: its DUID is the DUID-LL of this MAC
	// (the bridge's), stable across restarts.
	ServerMAC net.HardwareAddr
	// DNS servers (option 23) and search list (option 24); IPv4 servers
	// in DNS are left out, as DHCPv6 cannot carry them.
	DNS    []netip.Addr
	Search []string
	// LeaseTime is each address's valid and preferred lifetime; T1 is
	// half of it, T2 four fifths (RFC 8415 §21.4's recommendation).
	// Default DefaultLeaseTime.
	LeaseTime time.Duration
	// Quarantine is how long a declined address is not handed out.
	// Default DefaultQuarantine.
	Quarantine time.Duration
}

// Allocator6 is what the DHCPv6 handler needs of the lease store. As for
// [Allocator], a change returns once it is durable.
type Allocator6 interface {
	// Lookup returns the lease of mac (its IPv6 address is IP6).
	Lookup(mac net.HardwareAddr) (leases.Lease, bool, error)
	// Bind6 marks ip6 bound to mac until expires (leases.Tx.Bind6).
	Bind6(mac net.HardwareAddr, ip6 netip.Addr, expires time.Time) (leases.Lease, error)
	// Release6 handles RELEASE (leases.Tx.Release6).
	Release6(mac net.HardwareAddr, ip6 netip.Addr) (leases.Lease, bool, error)
	// Decline6 quarantines ip6 until until (leases.Tx.Decline6).
	Decline6(mac net.HardwareAddr, ip6 netip.Addr, until time.Time) (leases.Lease, error)
}

// Hooks6 receive the DHCPv6 handler's events for metrics, like [Hooks];
// message types are their names ("SOLICIT"). Every field is optional.
type Hooks6 struct {
	Request func(t string)
	Reply   func(t string)
	Drop    func(reason string)
}

// Reasons a DHCPv6 message is dropped, besides the DHCPv4 ones that apply
// (DropMalformed, DropUnknownMAC, DropOtherServer, DropStoreError,
// DropUnsupported, DropDeclined, DropRateLimited).
const (
	// DropNoIP6 is a MAC whose lease has no IPv6 address (an attachment
	// of an IPv4-only network, or a dynamic DHCPv4 lease).
	DropNoIP6 = "no_ip6"
	// DropServerID is a message that must not carry a server identifier
	// but does (SOLICIT, REBIND, CONFIRM) or must and does not.
	DropServerID = "server_id"
	// DropUnicast is a SOLICIT, REBIND, CONFIRM or INFORMATION-REQUEST
	// sent to the server's unicast address (RFC 8415 §16: discarded;
	// REQUEST and RENEW get UseMulticast).
	DropUnicast = "unicast"
)

// Handler6 turns DHCPv6 requests into replies, as [Handler] does for
// DHCPv4: pure but for its Allocator6, safe for concurrent use.
//
// A client is the MAC its frames come from, which the server passes in,
// never its DUID: anti-spoofing holds a port to its MAC, a DUID is
// whatever the guest says (a VM cloned from an image keeps the image's
// DUID-LLT, and a guest could name a neighbour's), so keying on the frame
// serves clones and hostile guests alike correctly.
type Handler6 struct {
	cfg   Config6
	alloc Allocator6
	log   *slog.Logger
	now   func() time.Time
	duid  dhcpv6.DUID
	// Hooks receive events for metrics.
	Hooks Hooks6
}

// NewHandler6 checks cfg and returns a handler serving it from alloc.
func NewHandler6(cfg Config6, alloc Allocator6, log *slog.Logger) (*Handler6, error) {
	if !cfg.Subnet6.IsValid() || !cfg.Subnet6.Addr().Is6() || cfg.Subnet6.Addr().Is4In6() {
		return nil, fmt.Errorf("dhcp: subnet6 %v is not an IPv6 prefix", cfg.Subnet6)
	}
	if len(cfg.ServerMAC) != 6 {
		return nil, fmt.Errorf("dhcp: server MAC %q is not a 48-bit MAC", cfg.ServerMAC)
	}
	var dns []netip.Addr
	for _, d := range cfg.DNS {
		if d.Is6() && !d.Is4In6() {
			dns = append(dns, d)
		}
	}
	cfg.DNS = dns
	var err error
	if cfg.Search, cfg.LeaseTime, cfg.Quarantine, err = common(cfg.Search, cfg.LeaseTime, cfg.Quarantine, "DHCPv6's 32-bit lifetimes"); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	return &Handler6{
		cfg: cfg, alloc: alloc, now: time.Now,
		log:  log.With("component", "dhcpv6"),
		duid: &dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: cfg.ServerMAC},
	}, nil
}

// ServerID is the server's DUID.
func (h *Handler6) ServerID() dhcpv6.DUID { return h.duid }

// Handle answers one message from the client whose frames come from mac.
// A nil reply with a nil error means drop; an error means the store failed
// and no reply may be sent (the client retransmits). Every change a reply
// announces is durable before Handle returns it.
//
//   - SOLICIT: ADVERTISE of the MAC's address (preference 255, so the
//     client requests at once), or with rapid commit asked, a REPLY that
//     binds it. A MAC with no IPv6 address gets no answer, so a server
//     that has one can answer instead.
//   - REQUEST, RENEW, REBIND: REPLY binding the address; any other
//     address the client lists comes back with lifetimes 0, and a MAC
//     with no address gets NoAddrsAvail (REQUEST) or NoBinding (RENEW).
//   - RELEASE, DECLINE: the binding ends, or the address is quarantined
//     for Config6.Quarantine (the VM's reservation stays); REPLY Success,
//     with NoBinding in each IA_NA that lists no address of the client's.
//   - CONFIRM: Success when every address listed is in Subnet6, else
//     NotOnLink.
//   - INFORMATION-REQUEST: the DNS options alone.
//
// REQUEST, RENEW, RELEASE and DECLINE naming another server are dropped,
// and so are SOLICIT, REBIND and CONFIRM naming any, and an
// INFORMATION-REQUEST carrying an IA (RFC 8415 §16.12). Only IA_NA is
// served: a message with none binds nothing (SOLICIT and REQUEST get
// NoAddrsAvail), and each IA_PD comes back with NoPrefixAvail.
//
// Handle serves a message sent to the multicast address; see
// [Handler6.HandleFrom] for one sent to the server's own address.
func (h *Handler6) Handle(req *dhcpv6.Message, mac net.HardwareAddr) (*dhcpv6.Message, error) {
	reply, _, err := h.HandleFrom(req, mac, false)
	return reply, err
}

// HandleFrom is Handle for a message whose IPv6 destination was
// multicast (ff02::1:2) or, with unicast, the server's own address, which
// this server never offers (no Server Unicast option): a SOLICIT, REBIND,
// CONFIRM or INFORMATION-REQUEST is then dropped, and a REQUEST or RENEW
// answered with UseMulticast alone (RFC 8415 §16, §18.4), so the client
// sends it again to ff02::1:2. A RELEASE or DECLINE is served as sent:
// some clients unicast it and never send it again.
//
// undo, when not nil, reverts the binding a Rapid Commit REPLY made: the
// caller calls it when that reply could not be sent, so that no binding
// stays recorded for a client that never learnt of it.
func (h *Handler6) HandleFrom(req *dhcpv6.Message, mac net.HardwareAddr, unicast bool) (reply *dhcpv6.Message, undo func() error, err error) {
	reply, undo, err = h.handle(req, mac, unicast)
	if err != nil || reply == nil {
		undo = nil
	}
	return reply, undo, err
}

func (h *Handler6) handle(req *dhcpv6.Message, mac net.HardwareAddr, unicast bool) (reply *dhcpv6.Message, undo func() error, err error) {
	if req == nil || len(mac) != 6 {
		h.drop(DropMalformed)
		return nil, nil, nil
	}
	t := req.MessageType
	h.request(t)
	defer func() {
		if err != nil {
			h.drop(DropStoreError)
			h.log.Error("lease store failed; not replying", "type", t, "mac", mac.String(), "err", err)
		}
		if reply != nil && h.Hooks.Reply != nil {
			h.Hooks.Reply(reply.MessageType.String())
		}
	}()
	cid := req.Options.ClientID()
	sid := req.Options.ServerID()
	ours := sid != nil && sid.Equal(h.duid)
	switch t {
	case dhcpv6.MessageTypeSolicit, dhcpv6.MessageTypeRequest, dhcpv6.MessageTypeRenew,
		dhcpv6.MessageTypeRebind, dhcpv6.MessageTypeRelease, dhcpv6.MessageTypeDecline, dhcpv6.MessageTypeConfirm:
		if cid == nil {
			return h.dropped3(DropMalformed, t, mac, "no client identifier")
		}
	case dhcpv6.MessageTypeInformationRequest:
		if len(req.Options.IANA()) > 0 || len(req.Options.IATA()) > 0 || len(req.Options.IAPD()) > 0 {
			return h.dropped3(DropMalformed, t, mac, "INFORMATION-REQUEST carries an IA (RFC 8415 §16.12)")
		}
	default:
		return h.dropped3(DropUnsupported, t, mac, "not a client message this server handles")
	}
	switch t {
	case dhcpv6.MessageTypeSolicit, dhcpv6.MessageTypeRebind, dhcpv6.MessageTypeConfirm:
		if sid != nil {
			return h.dropped3(DropServerID, t, mac, "carries a server identifier")
		}
	case dhcpv6.MessageTypeRequest, dhcpv6.MessageTypeRenew, dhcpv6.MessageTypeRelease, dhcpv6.MessageTypeDecline:
		if sid == nil {
			return h.dropped3(DropServerID, t, mac, "has no server identifier")
		}
		if !ours {
			return h.dropped3(DropOtherServer, t, mac, "names another server")
		}
	case dhcpv6.MessageTypeInformationRequest:
		if sid != nil && !ours {
			return h.dropped3(DropOtherServer, t, mac, "names another server")
		}
	}
	if unicast {
		switch t {
		case dhcpv6.MessageTypeRequest, dhcpv6.MessageTypeRenew:
			h.log.Debug("unicast message: UseMulticast", "type", t, "mac", mac.String())
			return h.reply(req, &dhcpv6.OptStatusCode{StatusCode: iana.StatusUseMulticast, StatusMessage: "send to ff02::1:2"}), nil, nil
		case dhcpv6.MessageTypeRelease, dhcpv6.MessageTypeDecline:
			// Served, unlike RFC 8415 §18.4's UseMulticast: busybox
			// udhcpc6 (1.35) unicasts its RELEASE and never sends it
			// again, so refusing it leaves the binding until it lapses;
			// and they only end what the sender holds (the frame's MAC,
			// which anti-spoofing ties to its port), never give.
		default:
			return h.dropped3(DropUnicast, t, mac, "sent to the server's unicast address (RFC 8415 §16)")
		}
	}
	switch t {
	case dhcpv6.MessageTypeConfirm:
		r, err := h.confirm(req, mac)
		return r, nil, err
	case dhcpv6.MessageTypeInformationRequest:
		return h.reply(req, h.dnsOptions()...), nil, nil
	}
	l, ok, err := h.alloc.Lookup(mac)
	if err != nil {
		return nil, nil, err
	}
	ok = ok && l.IP6.IsValid()
	if ok && l.State6 == leases.StateDeclined {
		if t == dhcpv6.MessageTypeSolicit {
			return h.dropped3(DropDeclined, t, mac, "its address "+l.IP6.String()+" is quarantined")
		}
		ok = false
	}
	hasIANA := len(req.Options.IANA()) > 0
	switch t {
	case dhcpv6.MessageTypeSolicit:
		if !ok {
			return h.dropped3(DropNoIP6, t, mac, "no IPv6 address is reserved for the MAC")
		}
		if !hasIANA {
			// §18.3.1: an Advertise with NoAddrsAvail alone, with
			// Rapid Commit or not (nothing is bound).
			return h.message(req, dhcpv6.MessageTypeAdvertise, h.noAddrs(req)...), nil, nil
		}
		if req.GetOneOption(dhcpv6.OptionRapidCommit) != nil {
			return h.bind(req, mac, l, true)
		}
		return h.advertise(req, l), nil, nil
	case dhcpv6.MessageTypeRequest, dhcpv6.MessageTypeRenew, dhcpv6.MessageTypeRebind:
		switch {
		case ok && hasIANA:
			return h.bind(req, mac, l, false)
		case ok && t == dhcpv6.MessageTypeRequest:
			return h.reply(req, h.noAddrs(req)...), nil, nil
		case ok:
			// A RENEW or REBIND of no IA_NA: nothing to extend.
			return h.reply(req, append(h.iapds(req, iana.StatusNoBinding), h.dnsOptions()...)...), nil, nil
		}
		r, err := h.noBinding(req, mac)
		return r, nil, err
	case dhcpv6.MessageTypeRelease:
		r, err := h.release(req, mac, l, ok)
		return r, nil, err
	default: // DECLINE
		r, err := h.decline(req, mac, l, ok)
		return r, nil, err
	}
}

// advertise offers l's address in the client's first IA_NA.
func (h *Handler6) advertise(req *dhcpv6.Message, l leases.Lease) *dhcpv6.Message {
	opts := append(h.ianas(req, l.IP6), h.iapds(req, iana.StatusNoPrefixAvail)...)
	opts = append(opts, dhcpv6.OptPreference(255))
	return h.message(req, dhcpv6.MessageTypeAdvertise, append(opts, h.dnsOptions()...)...)
}

// bind records the binding and replies with it. undo, for a Rapid Commit
// reply, reverts a binding that did not exist before.
func (h *Handler6) bind(req *dhcpv6.Message, mac net.HardwareAddr, l leases.Lease, rapid bool) (*dhcpv6.Message, func() error, error) {
	if _, err := h.alloc.Bind6(mac, l.IP6, h.now().Add(h.cfg.LeaseTime)); err != nil {
		if errors.Is(err, leases.ErrConflict) || errors.Is(err, leases.ErrNotFound) {
			// The lease changed between the lookup and the bind (a CNI
			// DEL): the client asks again.
			return h.dropped3(DropNotLeased, req.MessageType, mac, err.Error())
		}
		return nil, nil, err
	}
	opts := append(h.ianas(req, l.IP6), h.iapds(req, iana.StatusNoPrefixAvail)...)
	var undo func() error
	if rapid {
		opts = append(opts, &dhcpv6.OptionGeneric{OptionCode: dhcpv6.OptionRapidCommit})
		if l.State6 != leases.StateBound {
			undo = func() error {
				_, _, err := h.alloc.Release6(mac, l.IP6)
				h.log.Info("rapid commit reply not sent: binding undone", "mac", mac.String(), "ip6", l.IP6, "err", err)
				return err
			}
		}
	}
	h.log.Debug("bound", "type", req.MessageType, "mac", mac.String(), "ip6", l.IP6)
	return h.reply(req, append(opts, h.dnsOptions()...)...), undo, nil
}

// noBinding answers a REQUEST, RENEW or REBIND from a MAC with no address
// (RFC 8415 §18.3.2, §18.3.4, §18.3.5): each IA_NA with NoAddrsAvail or
// NoBinding, and the addresses it lists with lifetimes 0 so the client
// stops using them. A REBIND listing none gets no answer.
func (h *Handler6) noBinding(req *dhcpv6.Message, mac net.HardwareAddr) (*dhcpv6.Message, error) {
	code := iana.StatusNoBinding
	if req.MessageType == dhcpv6.MessageTypeRequest {
		code = iana.StatusNoAddrsAvail
	}
	var opts []dhcpv6.Option
	listed := false
	for _, ia := range req.Options.IANA() {
		out := &dhcpv6.OptIANA{IaId: ia.IaId}
		for _, a := range ia.Options.Addresses() {
			listed = true
			out.Options.Add(&dhcpv6.OptIAAddress{IPv6Addr: a.IPv6Addr})
		}
		if req.MessageType != dhcpv6.MessageTypeRebind {
			out.Options.Add(&dhcpv6.OptStatusCode{StatusCode: code, StatusMessage: "no IPv6 address is reserved for " + mac.String()})
		}
		opts = append(opts, out)
	}
	if req.MessageType == dhcpv6.MessageTypeRebind && !listed {
		return h.dropped(DropNoIP6, req.MessageType, mac, "no IPv6 address is reserved for the MAC")
	}
	return h.reply(req, opts...), nil
}

// release ends the binding of the client's address when an IA_NA lists
// it (RFC 8415 §18.3.7); every IA_NA that lists none of the client's
// addresses comes back with NoBinding.
func (h *Handler6) release(req *dhcpv6.Message, mac net.HardwareAddr, l leases.Lease, ok bool) (*dhcpv6.Message, error) {
	if ok && h.lists(req, l.IP6) {
		if _, _, err := h.alloc.Release6(mac, l.IP6); err != nil {
			return nil, err
		}
		h.log.Info("released", "mac", mac.String(), "ip6", l.IP6)
	}
	return h.reply(req, h.ended(req, l.IP6, ok)...), nil
}

// decline quarantines the client's address when an IA_NA lists it (RFC
// 8415 §18.3.8), answering as release does.
func (h *Handler6) decline(req *dhcpv6.Message, mac net.HardwareAddr, l leases.Lease, ok bool) (*dhcpv6.Message, error) {
	if ok && h.lists(req, l.IP6) {
		until := h.now().Add(h.cfg.Quarantine)
		if _, err := h.alloc.Decline6(mac, l.IP6, until); err != nil && !errors.Is(err, leases.ErrConflict) {
			return nil, err
		}
		h.log.Error("a VM found its reserved IPv6 address in use on the bridge; quarantined", "mac", mac.String(), "ip6", l.IP6, "until", until.UTC())
	}
	return h.reply(req, h.ended(req, l.IP6, ok)...), nil
}

// confirm says whether the addresses a client lists are on this link
// (RFC 8415 §18.3.3): no addresses, no reply. The address a VM brought
// from another node (its lease's home6) is on this link too.
func (h *Handler6) confirm(req *dhcpv6.Message, mac net.HardwareAddr) (*dhcpv6.Message, error) {
	code, n := iana.StatusSuccess, 0
	var own netip.Addr
	if l, ok, err := h.alloc.Lookup(mac); err == nil && ok && l.Home6.IsValid() {
		own = l.IP6
	}
	for _, ia := range req.Options.IANA() {
		for _, a := range ia.Options.Addresses() {
			n++
			if ip, ok := netip.AddrFromSlice(a.IPv6Addr); !ok || (!h.cfg.Subnet6.Contains(ip) && ip != own) {
				code = iana.StatusNotOnLink
			}
		}
	}
	if n == 0 {
		return h.dropped(DropMalformed, req.MessageType, mac, "CONFIRM lists no address")
	}
	return h.reply(req, &dhcpv6.OptStatusCode{StatusCode: code}), nil
}

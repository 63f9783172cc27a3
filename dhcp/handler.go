package dhcp

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/vmlane/vmlane/leases"
)

// Handler turns requests into replies. It keeps no lease state of its own:
// the Allocator is the only state, so one Handler is safe for concurrent
// use if its Allocator is.
type Handler struct {
	cfg   Config
	alloc Allocator
	log   *slog.Logger
	now   func() time.Time
	hooks Hooks
}

// Option configures a Handler.
type Option func(*Handler)

// WithLogger sets the logger (default: slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(h *Handler) { h.log = l } }

// WithClock replaces time.Now, for tests.
func WithClock(now func() time.Time) Option { return func(h *Handler) { h.now = now } }

// WithHooks sets the metric hooks.
func WithHooks(hk Hooks) Option { return func(h *Handler) { h.hooks = hk } }

// NewHandler checks cfg and returns a handler serving it from alloc.
func NewHandler(cfg Config, alloc Allocator, opts ...Option) (*Handler, error) {
	if !cfg.Subnet.IsValid() || !cfg.Subnet.Addr().Is4() {
		return nil, fmt.Errorf("dhcp: subnet %v is not an IPv4 prefix", cfg.Subnet)
	}
	cfg.Subnet = cfg.Subnet.Masked()
	if !cfg.ServerIP.Is4() || !cfg.Subnet.Contains(cfg.ServerIP) {
		return nil, fmt.Errorf("dhcp: server address %v is not in subnet %s", cfg.ServerIP, cfg.Subnet)
	}
	if cfg.Router.IsValid() && (!cfg.Router.Is4() || !cfg.Subnet.Contains(cfg.Router)) {
		return nil, fmt.Errorf("dhcp: router %s is not in subnet %s", cfg.Router, cfg.Subnet)
	}
	for _, d := range cfg.DNS {
		if !d.Is4() {
			return nil, fmt.Errorf("dhcp: DNS server %s is not IPv4", d)
		}
	}
	if cfg.MTU != 0 && (cfg.MTU < 68 || cfg.MTU > 65535) {
		// RFC 2132 §5.1: the minimum legal MTU is 68.
		return nil, fmt.Errorf("dhcp: MTU %d is outside 68..65535", cfg.MTU)
	}
	if r := cfg.DynamicRange; r != nil && (!cfg.Subnet.Contains(r.First) || !cfg.Subnet.Contains(r.Last) || r.Last.Less(r.First)) {
		return nil, fmt.Errorf("dhcp: dynamic range %s is not inside subnet %s", r, cfg.Subnet)
	}
	for _, r := range cfg.Routes {
		if !r.Dest.Addr().Is4() || !r.Via.Is4() {
			return nil, fmt.Errorf("dhcp: route %s via %s is not IPv4", r.Dest, r.Via)
		}
	}
	var err error
	if cfg.Search, cfg.LeaseTime, cfg.Quarantine, err = common(cfg.Search, cfg.LeaseTime, cfg.Quarantine, "option 51"); err != nil {
		return nil, err
	}
	if cfg.Hostname == nil {
		cfg.Hostname = defaultHostname
	}
	h := &Handler{cfg: cfg, alloc: alloc, log: slog.Default(), now: time.Now}
	for _, o := range opts {
		o(h)
	}
	h.log = h.log.With("component", "dhcp")
	return h, nil
}

// common checks what both servers' configs have and fills in their
// defaults: the search list (its encoding, RFC 1035 labels as option 119
// and DHCPv6 option 24 both use), the lease time (which must fit field's
// 32 bits) and the quarantine.
func common(search []string, lease, quarantine time.Duration, field string) ([]string, time.Duration, time.Duration, error) {
	// A fully qualified name's trailing dot is the root label, which the
	// RFC 1035 encoding already ends every name with; kept, it would
	// encode as one more, empty, name (the root domain).
	out := make([]string, len(search))
	for i, d := range search {
		out[i] = strings.TrimSuffix(d, ".")
	}
	if _, err := searchBytes(out); err != nil {
		return nil, 0, 0, err
	}
	if lease <= 0 {
		lease = DefaultLeaseTime
	}
	if lease/time.Second > 0xfffffffe {
		return nil, 0, 0, fmt.Errorf("dhcp: lease time %s does not fit %s", lease, field)
	}
	if quarantine <= 0 {
		quarantine = DefaultQuarantine
	}
	return out, lease, quarantine, nil
}

func defaultHostname(l leases.Lease) string {
	if l.Pod.Name != "" {
		return l.Pod.Name
	}
	return l.Hostname
}

// Handle answers one request. A nil reply with a nil error means drop; an
// error means the store failed and no reply may be sent (the client will
// retransmit). Every change a reply announces is durable before Handle
// returns it, but the bind of a CNI reservation when the allocator defers
// it (StoreAllocator.Defer): that is written within LateBindDelay.
func (h *Handler) Handle(req *dhcpv4.DHCPv4) (reply *dhcpv4.DHCPv4, err error) {
	start := h.now()
	if req == nil {
		h.hooks.drop(DropMalformed)
		return nil, nil
	}
	if req.OpCode != dhcpv4.OpcodeBootRequest {
		return h.dropped(DropBootReply, req, "not a BOOTREQUEST")
	}
	if req.HWType != iana.HWTypeEthernet || len(req.ClientHWAddr) != 6 {
		return h.dropped(DropHardware, req, "not an Ethernet client")
	}
	mt := req.MessageType()
	h.hooks.request(mt)
	defer func() {
		h.hooks.latency(mt, h.now().Sub(start))
		if err != nil {
			h.hooks.drop(DropStoreError)
			h.log.Error("lease store failed; not replying", "type", mt, "mac", req.ClientHWAddr.String(), "err", err)
		}
		if reply != nil {
			h.hooks.reply(reply.MessageType())
		}
	}()
	switch mt {
	case dhcpv4.MessageTypeDiscover:
		return h.discover(req)
	case dhcpv4.MessageTypeRequest:
		return h.request(req)
	case dhcpv4.MessageTypeRelease:
		return nil, h.release(req)
	case dhcpv4.MessageTypeDecline:
		return nil, h.decline(req)
	case dhcpv4.MessageTypeInform:
		return h.inform(req)
	case dhcpv4.MessageTypeNone:
		return h.dropped(DropMalformed, req, "no message type (plain BOOTP is not served)")
	default:
		return h.dropped(DropUnsupported, req, "message type not served by a server")
	}
}

// dropped counts and logs a drop at debug level: a guest can send any
// number of these, so they must not flood the log.
func (h *Handler) dropped(reason string, req *dhcpv4.DHCPv4, msg string) (*dhcpv4.DHCPv4, error) {
	h.hooks.drop(reason)
	h.log.Debug("dropping packet: "+msg, "reason", reason, "mac", req.ClientHWAddr.String(), "xid", req.TransactionID, "type", req.MessageType())
	return nil, nil
}

func (h *Handler) discover(req *dhcpv4.DHCPv4) (*dhcpv4.DHCPv4, error) {
	mac := req.ClientHWAddr
	l, ok, err := h.alloc.Lookup(mac)
	if err != nil {
		return nil, err
	}
	if !ok {
		switch {
		case l.MAC != "" && !l.Known():
			// A newer vmlane's lease holds the MAC: what it means is
			// not this version's to guess, and the store refuses the
			// MAC a second lease.
			return h.dropped(DropUnknownLease, req, fmt.Sprintf("the MAC's lease of %s has state %q and source %q, which this version does not know", l.IP, l.State, l.Source))
		case l.State == leases.StateDeclined && (h.cfg.DynamicRange == nil || l.Source == leases.SourceCNI):
			// A quarantined CNI reservation is still the VM's address:
			// a dynamic one besides it would give the MAC two leases
			// once the quarantine ends (the store refuses it too).
			return h.dropped(DropDeclined, req, "the MAC's reserved address "+l.IP.String()+" is quarantined after a DECLINE until "+l.Expires.Format(time.RFC3339))
		case l.State == leases.StateHeld:
			// A frame from a VM's MAC while its pod is gone: not the
			// VM's (anti-spoofing lets no port send it), and the MAC
			// stays the VM's.
			return h.dropped(DropHeld, req, "the MAC belongs to VM "+l.VMName+", whose pod went; its addresses are held for its next pod until "+l.Expires.Format(time.RFC3339))
		}
		if h.cfg.DynamicRange == nil {
			return h.dropped(DropUnknownMAC, req, "no reservation for this MAC and no dynamic range")
		}
		want := addrOf(req.RequestedIPAddress())
		l, err = h.alloc.Allocate(mac, want, *h.cfg.DynamicRange, h.now().Add(OfferHold))
		if errors.Is(err, leases.ErrExhausted) {
			h.log.Warn("dynamic range exhausted", "range", h.cfg.DynamicRange, "mac", mac.String())
			return h.dropped(DropExhausted, req, "dynamic range exhausted")
		}
		if err != nil {
			return nil, err
		}
	}
	h.log.Debug("offering", "mac", mac.String(), "ip", l.IP, "source", l.Source)
	return h.ack(req, dhcpv4.MessageTypeOffer, l, true)
}

func (h *Handler) request(req *dhcpv4.DHCPv4) (*dhcpv4.DHCPv4, error) {
	mac := req.ClientHWAddr
	sid := addrOf(req.ServerIdentifier())
	requested := addrOf(req.RequestedIPAddress())
	ciaddr := addrOf(req.ClientIPAddr)
	switch {
	case sid.IsValid():
		// SELECTING (RFC 2131 §4.3.2): the client chose among offers.
		if sid != h.cfg.ServerIP {
			return h.dropped(DropOtherServer, req, "client selected another server")
		}
		if !requested.IsValid() {
			return h.dropped(DropMalformed, req, "SELECTING request without requested address")
		}
		l, ok, err := h.alloc.Lookup(mac)
		if err != nil {
			return nil, err
		}
		if !ok && h.cfg.DynamicRange != nil && inPool(*h.cfg.DynamicRange, requested) {
			// The offer expired (or the file was swept) between OFFER
			// and REQUEST: take the address again if it is still free.
			l, err = h.alloc.Allocate(mac, requested, *h.cfg.DynamicRange, h.now().Add(OfferHold))
			ok = err == nil
			// Exhausted, or the MAC has a lease already (a quarantined
			// reservation): NAK, as for any address not to be had.
			if err != nil && !errors.Is(err, leases.ErrExhausted) && !errors.Is(err, leases.ErrInUse) {
				return nil, err
			}
		}
		if !ok {
			return h.nak(req, NAKNoLease)
		}
		if l.IP != requested {
			return h.nak(req, NAKWrongAddress)
		}
		return h.bind(req, l)
	case requested.IsValid() && !ciaddr.IsValid():
		// INIT-REBOOT: the client verifies a remembered address.
		l, ok, err := h.alloc.Lookup(mac)
		if err != nil {
			return nil, err
		}
		if !ok {
			// RFC 2131 §4.3.2: "If the DHCP server has no record of
			// this client, then it MUST remain silent".
			return h.dropped(DropNoRecord, req, "INIT-REBOOT from a client without a lease")
		}
		if !h.cfg.Subnet.Contains(requested) && !l.Home.Contains(requested) {
			return h.nak(req, NAKWrongNetwork)
		}
		if l.IP != requested {
			return h.nak(req, NAKWrongAddress)
		}
		return h.bind(req, l)
	case ciaddr.IsValid():
		// RENEWING (unicast) or REBINDING (broadcast): ciaddr is the
		// address in use, option 50 must be absent.
		l, ok, err := h.alloc.Lookup(mac)
		if err != nil {
			return nil, err
		}
		if !ok {
			return h.nak(req, NAKNoLease)
		}
		if l.IP != ciaddr {
			return h.nak(req, NAKWrongAddress)
		}
		return h.bind(req, l)
	default:
		return h.dropped(DropMalformed, req, "REQUEST with neither server identifier, requested address nor ciaddr")
	}
}

// bind persists the binding, then builds the ACK (persist before reply).
func (h *Handler) bind(req *dhcpv4.DHCPv4, l leases.Lease) (*dhcpv4.DHCPv4, error) {
	name := hostnameLabel(h.cfg.Hostname(l))
	if name == "" {
		name = hostnameLabel(req.HostName())
	}
	bound, err := h.alloc.Bind(req.ClientHWAddr, l.IP, leaseEnd(h.now(), h.cfg.LeaseTime), name)
	if errors.Is(err, leases.ErrConflict) || errors.Is(err, leases.ErrNotFound) {
		h.log.Info("refusing bind", "mac", req.ClientHWAddr.String(), "ip", l.IP, "err", err)
		return h.nak(req, NAKConflict)
	}
	if err != nil {
		return nil, err
	}
	h.log.Debug("bound", "mac", req.ClientHWAddr.String(), "ip", bound.IP, "expires", bound.Expires)
	return h.ack(req, dhcpv4.MessageTypeAck, bound, true)
}

func (h *Handler) release(req *dhcpv4.DHCPv4) error {
	mac := req.ClientHWAddr
	l, ok, err := h.alloc.Lookup(mac)
	if err != nil {
		return err
	}
	// RFC 2131 §4.3.4: the address released is ciaddr. Ignore a RELEASE
	// of an address the MAC does not hold: it cannot free someone else's.
	if !ok || l.IP != addrOf(req.ClientIPAddr) {
		h.dropped(DropNotLeased, req, "RELEASE of an address the client does not hold")
		return nil
	}
	if _, _, err := h.alloc.Release(mac); err != nil {
		return err
	}
	h.log.Info("released", "mac", mac.String(), "ip", l.IP, "source", l.Source)
	return nil
}

func (h *Handler) decline(req *dhcpv4.DHCPv4) error {
	mac := req.ClientHWAddr
	ip := addrOf(req.RequestedIPAddress())
	l, ok, err := h.alloc.Lookup(mac)
	if err != nil {
		return err
	}
	// Only the holder may decline an address, else any guest could
	// quarantine its neighbours' addresses.
	if !ok || !ip.IsValid() || l.IP != ip {
		h.dropped(DropNotLeased, req, "DECLINE of an address the client does not hold")
		return nil
	}
	until := h.now().Add(h.cfg.Quarantine)
	if _, err := h.alloc.Decline(mac, ip, until); err != nil {
		if errors.Is(err, leases.ErrConflict) {
			h.dropped(DropNotLeased, req, "DECLINE refused by the store")
			return nil
		}
		return err
	}
	// l is served (Lookup's ok), so its source is one this version knows.
	if l.Source == leases.SourceCNI {
		// The pod's address is used by someone else on the bridge: the
		// VM cannot get another (its address is the pod IP), so an
		// operator must find the squatter.
		h.log.Error("address conflict: VM declined its reserved pod address; another host on the bridge uses it",
			"ip", ip, "mac", mac.String(), "pod", l.Pod.Namespace+"/"+l.Pod.Name, "attachment", l.Key().String(), "quarantined_until", until)
	} else {
		h.log.Warn("address declined; quarantined, the next DISCOVER gets another", "ip", ip, "mac", mac.String(), "until", until)
	}
	return nil
}

func (h *Handler) inform(req *dhcpv4.DHCPv4) (*dhcpv4.DHCPv4, error) {
	// RFC 2131 §4.3.5: ACK with configuration only: no yiaddr, no lease
	// time. The hostname comes with it if the MAC has a lease, but not
	// from a lease this version does not know (a newer vmlane's).
	l, _, err := h.alloc.Lookup(req.ClientHWAddr)
	if err != nil {
		return nil, err
	}
	if !l.Known() {
		l = leases.Lease{}
	}
	return h.ack(req, dhcpv4.MessageTypeAck, l, false)
}

func (h *Handler) nak(req *dhcpv4.DHCPv4, reason string) (*dhcpv4.DHCPv4, error) {
	h.hooks.nak(reason)
	h.log.Debug("NAK", "reason", reason, "mac", req.ClientHWAddr.String(), "requested", req.RequestedIPAddress(), "ciaddr", req.ClientIPAddr)
	r, err := dhcpv4.NewReplyFromRequest(req,
		dhcpv4.WithMessageType(dhcpv4.MessageTypeNak),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(ip4(h.cfg.ServerIP))),
		dhcpv4.WithOption(dhcpv4.OptMessage(reason)),
	)
	if err != nil {
		return nil, err
	}
	if !req.GatewayIPAddr.IsUnspecified() && req.GatewayIPAddr != nil {
		// RFC 2131 §4.3.2: a NAK through a relay has the broadcast bit
		// set so the relay broadcasts it.
		r.SetBroadcast()
	}
	return r, nil
}

func addrOf(ip net.IP) netip.Addr {
	ip4 := ip.To4()
	if ip4 == nil {
		return netip.Addr{}
	}
	a := netip.AddrFrom4([4]byte(ip4))
	if a.IsUnspecified() {
		return netip.Addr{}
	}
	return a
}

func ip4(a netip.Addr) net.IP {
	b := a.As4()
	return net.IP(b[:])
}

func inPool(p leases.Pool, a netip.Addr) bool {
	return p.First.Compare(a) <= 0 && a.Compare(p.Last) <= 0
}

// leaseEnd is when a lease granted at now ends in the lease file. The file
// keeps whole seconds, so the end is rounded up: rounded down, the file
// would say a lease ends up to a second before the client's does, and the
// expiry sweep could give a dynamic address to another MAC while its
// holder still has it. The client counts from when it sent the REQUEST
// (RFC 2131 §4.4.1), before now, so its lease never outlasts the file's.
func leaseEnd(now time.Time, d time.Duration) time.Time {
	end := now.Add(d)
	if t := end.Truncate(time.Second); !t.Equal(end) {
		end = t.Add(time.Second)
	}
	return end
}

// renewsHere reports whether req, a request sent to another server's
// address, renews a lease of this server's: a REQUEST in RENEWING (ciaddr
// set, no server identifier, no requested address, no relay) whose ciaddr
// is the MAC's address here (a VM that moved here renewing with its
// home's server).
func (h *Handler) renewsHere(req *dhcpv4.DHCPv4) bool {
	ci := addrOf(req.ClientIPAddr)
	if req.MessageType() != dhcpv4.MessageTypeRequest || !ci.IsValid() || addrOf(req.ServerIdentifier()).IsValid() ||
		addrOf(req.RequestedIPAddress()).IsValid() || addrOf(req.GatewayIPAddr).IsValid() {
		return false
	}
	l, ok, err := h.alloc.Lookup(req.ClientHWAddr)
	return err == nil && ok && l.IP == ci
}

// portOf returns the bridge port the lease of mac is checked on, where the
// server sends its replies to mac: "" when it has none.
func (h *Handler) portOf(mac net.HardwareAddr) string {
	l, ok, err := h.alloc.Lookup(mac)
	if err != nil || !ok {
		return ""
	}
	return l.BridgePort
}

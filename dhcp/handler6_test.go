package dhcp

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/vmlane/vmlane/leases"
)

var (
	t6        = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	subnet6   = netip.MustParsePrefix("fd00:10:244:3::/64")
	vmMAC     = net.HardwareAddr{0x02, 0x76, 0x0a, 0xf4, 0x03, 0x02}
	strayMAC  = net.HardwareAddr{0x52, 0x54, 0x00, 0x00, 0x00, 0x09}
	serverMAC = net.HardwareAddr{0x02, 0x76, 0x0a, 0xf4, 0x03, 0x01}
)

// store6 is a dual-stack lease store holding one VM reservation for vmMAC
// (10.244.3.2, fd00:10:244:3::2) and one IPv4-only lease for strayMAC.
func store6(t *testing.T) *leases.Store {
	t.Helper()
	s, err := leases.Open(filepath.Join(t.TempDir(), "leases.json"), netip.MustParsePrefix("10.244.3.0/24"), netip.MustParseAddr("10.244.3.1"),
		leases.WithSubnet6(subnet6, netip.MustParseAddr("fd00:10:244:3::1")), leases.WithClock(func() time.Time { return t6 }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve(leases.ReserveRequest{Key: leases.Key{ContainerID: "vm", IfName: "eth0"}, MAC: vmMAC.String(), VM: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve(leases.ReserveRequest{MAC: strayMAC.String()}); err != nil {
		t.Fatal(err)
	}
	return s
}

func handler6(t *testing.T, s *leases.Store) (*Handler6, map[string]int) {
	t.Helper()
	h, err := NewHandler6(Config6{
		Subnet6:   subnet6,
		ServerMAC: serverMAC,
		DNS:       []netip.Addr{netip.MustParseAddr("fd00:96::a"), netip.MustParseAddr("10.96.0.10")},
		Search:    []string{"default.svc.cluster.local."},
		LeaseTime: time.Hour,
	}, StoreAllocator{Store: s}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.now = func() time.Time { return t6 }
	drops := map[string]int{}
	h.Hooks.Drop = func(r string) { drops[r]++ }
	return h, drops
}

// msg6 builds a client message: a DUID-LLT (of another MAC than the
// frame's, as a cloned image has), an IA_NA listing addrs, and opts.
func msg6(t dhcpv6.MessageType, addrs []string, opts ...dhcpv6.Option) *dhcpv6.Message {
	m := &dhcpv6.Message{MessageType: t, TransactionID: dhcpv6.TransactionID{1, 2, 3}}
	m.AddOption(dhcpv6.OptClientID(&dhcpv6.DUIDLLT{HWType: iana.HWTypeEthernet, Time: 1, LinkLayerAddr: net.HardwareAddr{0x52, 0x54, 0, 0xaa, 0xbb, 0xcc}}))
	ia := &dhcpv6.OptIANA{IaId: [4]byte{0, 0, 0, 7}}
	for _, a := range addrs {
		ia.Options.Add(&dhcpv6.OptIAAddress{IPv6Addr: net.ParseIP(a)})
	}
	m.AddOption(ia)
	for _, o := range opts {
		m.AddOption(o)
	}
	return m
}

// bare6 is msg6 without the IA_NA: a client message with a client
// identifier and opts.
func bare6(t dhcpv6.MessageType, opts ...dhcpv6.Option) *dhcpv6.Message {
	m := msg6(t, nil, opts...)
	m.Options.Del(dhcpv6.OptionIANA)
	return m
}

// iapd is an IA_PD asking for any prefix.
var iapd = &dhcpv6.OptIAPD{IaId: [4]byte{0, 0, 0, 9}}

// summary renders a reply as one line: type, server id?, each IA_NA's
// addresses with lifetimes and status, the top-level status, DNS.
func summary(m *dhcpv6.Message) string {
	if m == nil {
		return "(no reply)"
	}
	s := m.MessageType.String()
	for _, ia := range m.Options.IANA() {
		s += " IA_NA("
		var parts []string
		for _, a := range ia.Options.Addresses() {
			parts = append(parts, a.IPv6Addr.String()+"/"+a.ValidLifetime.String())
		}
		if st := ia.Options.Status(); st != nil {
			parts = append(parts, st.StatusCode.String())
		}
		s += strings.Join(parts, " ") + ")"
	}
	for _, pd := range m.Options.IAPD() {
		s += " IA_PD("
		if st := pd.Options.Status(); st != nil {
			s += st.StatusCode.String()
		}
		s += ")"
	}
	if st := m.Options.Status(); st != nil {
		s += " status=" + st.StatusCode.String()
	}
	if m.GetOneOption(dhcpv6.OptionRapidCommit) != nil {
		s += " rapid"
	}
	if p := m.GetOneOption(dhcpv6.OptionPreference); p != nil {
		s += " pref"
	}
	if d := m.Options.DNS(); len(d) > 0 {
		s += " dns=" + d[0].String()
	}
	if m.GetOneOption(dhcpv6.OptionDomainSearchList) != nil {
		s += " search"
	}
	return s
}

func TestHandler6Messages(t *testing.T) {
	const ours, stray = "fd00:10:244:3::2", "fd00:10:244:3::77"
	sid := func(h *Handler6) dhcpv6.Option { return dhcpv6.OptServerID(h.ServerID()) }
	otherSID := dhcpv6.OptServerID(&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: strayMAC})
	rapid := &dhcpv6.OptionGeneric{OptionCode: dhcpv6.OptionRapidCommit}
	for _, tc := range []struct {
		name    string
		mac     net.HardwareAddr
		msg     func(h *Handler6) *dhcpv6.Message
		want    string
		state   string // the lease's state6 after, "" for reserved
		drop    string
		unicast bool // sent to the server's own address
	}{
		{"solicit", vmMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeSolicit, nil) },
			"ADVERTISE IA_NA(" + ours + "/1h0m0s) pref dns=fd00:96::a search", "", "", false},
		{"solicit with rapid commit", vmMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeSolicit, nil, rapid) },
			"REPLY IA_NA(" + ours + "/1h0m0s) rapid dns=fd00:96::a search", "bound", "", false},
		{"solicit from a MAC with no IPv6 address", strayMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeSolicit, nil) },
			"(no reply)", "", DropNoIP6, false},
		{"solicit from an unknown MAC", net.HardwareAddr{2, 0, 0, 0, 0, 1}, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeSolicit, nil) },
			"(no reply)", "", DropNoIP6, false},
		{"solicit naming a server", vmMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeSolicit, nil, sid(h)) },
			"(no reply)", "", DropServerID, false},
		{"request", vmMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeRequest, []string{ours}, sid(h)) },
			"REPLY IA_NA(" + ours + "/1h0m0s) dns=fd00:96::a search", "bound", "", false},
		{"request for another address", vmMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeRequest, []string{stray}, sid(h)) },
			"REPLY IA_NA(" + ours + "/1h0m0s " + stray + "/0s) dns=fd00:96::a search", "bound", "", false},
		{"request to another server", vmMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeRequest, []string{ours}, otherSID) },
			"(no reply)", "", DropOtherServer, false},
		{"request with no server id", vmMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeRequest, []string{ours}) },
			"(no reply)", "", DropServerID, false},
		{"request from a MAC with no IPv6 address", strayMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeRequest, []string{stray}, sid(h)) },
			"REPLY IA_NA(" + stray + "/0s NoAddrsAvail)", "", "", false},
		{"renew", vmMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeRenew, []string{ours}, sid(h)) },
			"REPLY IA_NA(" + ours + "/1h0m0s) dns=fd00:96::a search", "bound", "", false},
		{"renew with no binding", strayMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeRenew, []string{stray}, sid(h)) },
			"REPLY IA_NA(" + stray + "/0s NoBinding)", "", "", false},
		{"rebind", vmMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeRebind, []string{ours}) },
			"REPLY IA_NA(" + ours + "/1h0m0s) dns=fd00:96::a search", "bound", "", false},
		{"rebind of an address nobody gave", strayMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeRebind, []string{stray}) },
			"REPLY IA_NA(" + stray + "/0s)", "", "", false},
		{"rebind listing nothing, no binding", strayMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeRebind, nil) },
			"(no reply)", "", DropNoIP6, false},
		{"rebind naming a server", vmMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeRebind, []string{ours}, sid(h)) },
			"(no reply)", "", DropServerID, false},
		{"release", vmMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeRelease, []string{ours}, sid(h)) },
			"REPLY status=Success", "", "", false},
		{"decline", vmMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeDecline, []string{ours}, sid(h)) },
			"REPLY status=Success", "declined", "", false},
		{"decline of another address", vmMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeDecline, []string{stray}, sid(h)) },
			"REPLY IA_NA(NoBinding) status=Success", "", "", false},
		{"release of another address", vmMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeRelease, []string{stray}, sid(h)) },
			"REPLY IA_NA(NoBinding) status=Success", "", "", false},
		{"release from a MAC with no IPv6 address", strayMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeRelease, []string{ours}, sid(h)) },
			"REPLY IA_NA(NoBinding) status=Success", "", "", false},
		// RFC 8415 §18.3.1, §18.3.2: no IA_NA, no binding.
		{"solicit with no IA_NA", vmMAC, func(h *Handler6) *dhcpv6.Message { return bare6(dhcpv6.MessageTypeSolicit) },
			"ADVERTISE status=NoAddrsAvail", "", "", false},
		{"solicit with rapid commit and no IA_NA", vmMAC, func(h *Handler6) *dhcpv6.Message { return bare6(dhcpv6.MessageTypeSolicit, rapid) },
			"ADVERTISE status=NoAddrsAvail", "", "", false},
		{"solicit with only an IA_PD", vmMAC, func(h *Handler6) *dhcpv6.Message { return bare6(dhcpv6.MessageTypeSolicit, iapd) },
			"ADVERTISE IA_PD(NoPrefixAvail) status=NoAddrsAvail", "", "", false},
		{"solicit with an IA_NA and an IA_PD", vmMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeSolicit, nil, iapd) },
			"ADVERTISE IA_NA(" + ours + "/1h0m0s) IA_PD(NoPrefixAvail) pref dns=fd00:96::a search", "", "", false},
		{"request with no IA_NA", vmMAC, func(h *Handler6) *dhcpv6.Message { return bare6(dhcpv6.MessageTypeRequest, sid(h)) },
			"REPLY status=NoAddrsAvail", "", "", false},
		{"renew with no IA_NA", vmMAC, func(h *Handler6) *dhcpv6.Message { return bare6(dhcpv6.MessageTypeRenew, sid(h)) },
			"REPLY dns=fd00:96::a search", "", "", false},
		{"information-request carrying an IA_NA", vmMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeInformationRequest, nil) },
			"(no reply)", "", DropMalformed, false},
		// RFC 8415 §16, §18.4: this server gives no Server Unicast option.
		{"request by unicast", vmMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeRequest, []string{ours}, sid(h)) },
			"REPLY status=UseMulticast", "", "", true},
		{"renew by unicast", vmMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeRenew, []string{ours}, sid(h)) },
			"REPLY status=UseMulticast", "", "", true},
		// Served: busybox udhcpc6 unicasts its RELEASE and never retries.
		{"release by unicast", vmMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeRelease, []string{ours}, sid(h)) },
			"REPLY status=Success", "", "", true},
		{"decline by unicast", vmMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeDecline, []string{ours}, sid(h)) },
			"REPLY status=Success", "declined", "", true},
		{"solicit by unicast", vmMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeSolicit, nil, rapid) },
			"(no reply)", "", DropUnicast, true},
		{"information-request by unicast", strayMAC, func(h *Handler6) *dhcpv6.Message {
			return &dhcpv6.Message{MessageType: dhcpv6.MessageTypeInformationRequest}
		}, "(no reply)", "", DropUnicast, true},
		{"confirm on link", vmMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeConfirm, []string{ours}) },
			"REPLY status=Success", "", "", false},
		{"confirm off link", vmMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeConfirm, []string{ours, "fd99::5"}) },
			"REPLY status=NotOnLink", "", "", false},
		{"confirm listing nothing", vmMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeConfirm, nil) },
			"(no reply)", "", DropMalformed, false},
		{"information-request", strayMAC, func(h *Handler6) *dhcpv6.Message {
			m := &dhcpv6.Message{MessageType: dhcpv6.MessageTypeInformationRequest}
			return m
		}, "REPLY dns=fd00:96::a search", "", "", false},
		{"information-request to another server", strayMAC, func(h *Handler6) *dhcpv6.Message {
			m := &dhcpv6.Message{MessageType: dhcpv6.MessageTypeInformationRequest}
			m.AddOption(otherSID)
			return m
		}, "(no reply)", "", DropOtherServer, false},
		{"no client id", vmMAC, func(h *Handler6) *dhcpv6.Message {
			return &dhcpv6.Message{MessageType: dhcpv6.MessageTypeSolicit}
		}, "(no reply)", "", DropMalformed, false},
		{"a server's message", vmMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeAdvertise, nil) },
			"(no reply)", "", DropUnsupported, false},
		{"relay-forward", vmMAC, func(h *Handler6) *dhcpv6.Message { return msg6(dhcpv6.MessageTypeRelayForward, nil) },
			"(no reply)", "", DropUnsupported, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := store6(t)
			h, drops := handler6(t, s)
			req := tc.msg(h)
			reply, _, err := h.HandleFrom(req, tc.mac, tc.unicast)
			if err != nil {
				t.Fatal(err)
			}
			if got := summary(reply); got != tc.want {
				t.Errorf("reply = %s\nwant    %s", got, tc.want)
			}
			if reply != nil {
				if reply.TransactionID != req.TransactionID {
					t.Errorf("transaction id %v, want %v", reply.TransactionID, req.TransactionID)
				}
				if sid := reply.Options.ServerID(); sid == nil || !sid.Equal(h.ServerID()) {
					t.Errorf("server id %v, want ours", sid)
				}
				if cid := req.Options.ClientID(); cid != nil && !reply.Options.ClientID().Equal(cid) {
					t.Errorf("client id %v, want the request's %v", reply.Options.ClientID(), cid)
				}
				if ia := req.Options.OneIANA(); ia != nil && reply.Options.OneIANA() != nil && reply.Options.OneIANA().IaId != ia.IaId {
					t.Errorf("IAID %v, want the request's %v", reply.Options.OneIANA().IaId, ia.IaId)
				}
			}
			if tc.drop != "" && drops[tc.drop] != 1 {
				t.Errorf("drops %v, want one %s", drops, tc.drop)
			}
			if tc.drop == "" && len(drops) > 0 {
				t.Errorf("drops %v, want none", drops)
			}
			l, _, err := s.Get(leases.Key{ContainerID: "vm", IfName: "eth0"})
			if err != nil {
				t.Fatal(err)
			}
			if string(l.State6) != tc.state {
				t.Errorf("lease state6 %q, want %q", l.State6, tc.state)
			}
			if tc.state == "bound" && !l.Expires6.Equal(t6.Add(time.Hour)) {
				t.Errorf("expires6 %v, want %v", l.Expires6, t6.Add(time.Hour))
			}
		})
	}
}

// TestHandler6Lifecycle runs one client's exchanges in order against the
// store: bound, released, bound again, declined (then silent), and served
// again once the quarantine ends.
func TestHandler6Lifecycle(t *testing.T) {
	s := store6(t)
	h, drops := handler6(t, s)
	sid := dhcpv6.OptServerID(h.ServerID())
	const ours = "fd00:10:244:3::2"
	step := func(m *dhcpv6.Message, want string) {
		t.Helper()
		r, err := h.Handle(m, vmMAC)
		if err != nil {
			t.Fatal(err)
		}
		if got := summary(r); got != want {
			t.Fatalf("%s: %s, want %s", m.MessageType, got, want)
		}
	}
	step(msg6(dhcpv6.MessageTypeSolicit, nil), "ADVERTISE IA_NA("+ours+"/1h0m0s) pref dns=fd00:96::a search")
	step(msg6(dhcpv6.MessageTypeRequest, []string{ours}, sid), "REPLY IA_NA("+ours+"/1h0m0s) dns=fd00:96::a search")
	step(msg6(dhcpv6.MessageTypeRelease, []string{ours}, sid), "REPLY status=Success")
	step(msg6(dhcpv6.MessageTypeRequest, []string{ours}, sid), "REPLY IA_NA("+ours+"/1h0m0s) dns=fd00:96::a search")
	step(msg6(dhcpv6.MessageTypeDecline, []string{ours}, sid), "REPLY status=Success")
	step(msg6(dhcpv6.MessageTypeSolicit, nil), "(no reply)")
	step(msg6(dhcpv6.MessageTypeRequest, []string{ours}, sid), "REPLY IA_NA("+ours+"/0s NoAddrsAvail)")
	if drops[DropDeclined] != 1 {
		t.Errorf("drops %v, want one %s", drops, DropDeclined)
	}
	s2, err := leases.Open(s.Path(), s.Subnet(), s.Gateway(), leases.WithSubnet6(subnet6, netip.MustParseAddr("fd00:10:244:3::1")),
		leases.WithClock(func() time.Time { return t6.Add(DefaultQuarantine) }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Expire(); err != nil {
		t.Fatal(err)
	}
	step(msg6(dhcpv6.MessageTypeSolicit, nil), "ADVERTISE IA_NA("+ours+"/1h0m0s) pref dns=fd00:96::a search")
}

// TestHandler6RapidCommitUndo: a Rapid Commit REPLY that binds comes with
// an undo, which the server calls when the reply cannot be sent: the
// binding is gone again. One that renews a binding the client already
// has comes with none (the client holds the address either way).
func TestHandler6RapidCommitUndo(t *testing.T) {
	s := store6(t)
	h, _ := handler6(t, s)
	rapid := &dhcpv6.OptionGeneric{OptionCode: dhcpv6.OptionRapidCommit}
	key := leases.Key{ContainerID: "vm", IfName: "eth0"}
	state6 := func() leases.State {
		t.Helper()
		l, _, err := s.Get(key)
		if err != nil {
			t.Fatal(err)
		}
		return l.State6
	}
	reply, undo, err := h.HandleFrom(msg6(dhcpv6.MessageTypeSolicit, nil, rapid), vmMAC, false)
	if err != nil || reply == nil || undo == nil {
		t.Fatalf("rapid commit: reply %v, undo %v, err %v; want a REPLY and an undo", summary(reply), undo != nil, err)
	}
	if got := state6(); got != leases.StateBound {
		t.Fatalf("state6 after the rapid commit %q, want bound before the reply goes", got)
	}
	if err := undo(); err != nil {
		t.Fatal(err)
	}
	if got := state6(); got != "" {
		t.Errorf("state6 after undo %q, want the reservation alone", got)
	}
	// Bound by a REQUEST first: a later rapid commit has nothing to undo.
	if _, err := h.Handle(msg6(dhcpv6.MessageTypeRequest, []string{"fd00:10:244:3::2"}, dhcpv6.OptServerID(h.ServerID())), vmMAC); err != nil {
		t.Fatal(err)
	}
	if _, undo, err := h.HandleFrom(msg6(dhcpv6.MessageTypeSolicit, nil, rapid), vmMAC, false); err != nil || undo != nil {
		t.Errorf("rapid commit of a bound address: undo %v, err %v; want none", undo != nil, err)
	}
	// An ADVERTISE binds nothing, so has nothing to undo.
	if _, undo, _ := h.HandleFrom(msg6(dhcpv6.MessageTypeSolicit, nil), vmMAC, false); undo != nil {
		t.Error("ADVERTISE came with an undo")
	}
}

func TestHandler6StoreError(t *testing.T) {
	h, drops := handler6(t, store6(t))
	h.alloc = failing6{}
	r, err := h.Handle(msg6(dhcpv6.MessageTypeSolicit, nil), vmMAC)
	if err == nil || r != nil {
		t.Fatalf("Handle = %v, %v; want no reply and the store's error", r, err)
	}
	if drops[DropStoreError] != 1 {
		t.Errorf("drops %v", drops)
	}
}

type failing6 struct{}

var errStore = errors.New("disk on fire")

func (failing6) Lookup(net.HardwareAddr) (leases.Lease, bool, error) {
	return leases.Lease{}, false, errStore
}
func (failing6) Bind6(net.HardwareAddr, netip.Addr, time.Time) (leases.Lease, error) {
	return leases.Lease{}, errStore
}
func (failing6) Release6(net.HardwareAddr, netip.Addr) (leases.Lease, bool, error) {
	return leases.Lease{}, false, errStore
}
func (failing6) Decline6(net.HardwareAddr, netip.Addr, time.Time) (leases.Lease, error) {
	return leases.Lease{}, errStore
}

func TestNewHandler6Checks(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config6
		want string
	}{
		{Config6{Subnet6: netip.MustParsePrefix("10.0.0.0/24"), ServerMAC: serverMAC}, "not an IPv6 prefix"},
		{Config6{Subnet6: subnet6}, "not a 48-bit MAC"},
		{Config6{Subnet6: subnet6, ServerMAC: serverMAC, LeaseTime: 1 << 62}, "does not fit"},
	} {
		if _, err := NewHandler6(tc.cfg, nil, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewHandler6(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

func TestParseUDP6(t *testing.T) {
	payload := []byte{1, 2, 3, 4}
	b := make([]byte, 48, 52)
	b[0], b[6] = 0x60, 17
	copy(b[8:24], netip.MustParseAddr("fe80::1").AsSlice())
	copy(b[24:40], netip.MustParseAddr("ff02::1:2").AsSlice())
	b[40], b[41] = 0x02, 0x22 // port 546
	b[44], b[45] = 0, 12
	b = append(b, payload...)
	src, dst, p, ok := parseUDP6(b)
	if !ok || src.String() != "[fe80::1]:546" || dst.String() != "ff02::1:2" || string(p) != string(payload) {
		t.Fatalf("parseUDP6 = %v %v %v %v", src, dst, p, ok)
	}
	for _, bad := range [][]byte{b[:47], append([]byte{0x40}, b[1:]...), func() []byte { c := append([]byte(nil), b...); c[45] = 200; return c }()} {
		if _, _, _, ok := parseUDP6(bad); ok {
			t.Errorf("parseUDP6 accepted %x", bad)
		}
	}
}

// TestDeferredBind6 holds DHCPv6 binds to DHCPv4's durability rules: with
// Defer, a CNI reservation's bind is acknowledged at once and lands within
// LateBindDelay, batched with the v4 bind of the same lease; a RELEASE
// writes pending binds first, so the bind cannot land after it and undo
// it; a quarantined address is not acknowledged early.
func TestDeferredBind6(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := store6(t)
		a := NewStoreAllocator(s).Defer(t.Context(), slog.New(slog.NewTextHandler(io.Discard, nil)))
		ip6 := netip.MustParseAddr("fd00:10:244:3::2")
		expires := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
		onDisk := func() leases.Lease {
			t.Helper()
			l, _, err := s.Get(leases.Key{ContainerID: "vm", IfName: "eth0"})
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		l, err := a.Bind6(vmMAC, ip6, expires)
		if err != nil || l.State6 != leases.StateBound || !l.Expires6.Equal(expires) {
			t.Fatalf("Bind6 = %+v, %v; want bound at once", l, err)
		}
		if _, err := a.Bind(vmMAC, netip.MustParseAddr("10.244.3.2"), expires, "vm"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if l := onDisk(); l.State6 != "" || l.State != leases.StateReserved {
			t.Fatalf("on disk before LateBindDelay: %+v, want nothing bound yet", l)
		}
		time.Sleep(LateBindDelay)
		synctest.Wait()
		if l := onDisk(); l.State6 != leases.StateBound || l.State != leases.StateBound {
			t.Fatalf("on disk after LateBindDelay: %+v, want both families bound", l)
		}
		// A bind queued just before a RELEASE lands before it.
		if _, err := a.Bind6(vmMAC, ip6, expires.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := a.Release6(vmMAC, ip6); err != nil || !ok {
			t.Fatalf("Release6 = %v, %v", ok, err)
		}
		time.Sleep(2 * LateBindDelay)
		synctest.Wait()
		if l := onDisk(); l.State6 != "" {
			t.Fatalf("after RELEASE: %+v, want the IPv6 binding gone", l)
		}
		// Quarantined: written (and refused) before any reply.
		if _, err := a.Decline6(vmMAC, ip6, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Bind6(vmMAC, ip6, expires); !errors.Is(err, leases.ErrConflict) {
			t.Fatalf("Bind6 of a quarantined address = %v, want ErrConflict at once", err)
		}
	})
}

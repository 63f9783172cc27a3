package dhcp

// The options of the replies: what a DORA carries, and the corners of
// hostnames, routes, lease ends and search lists.

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/vmlane/vmlane/leases"
)

func selecting(t *testing.T, mac net.HardwareAddr, sid, ip netip.Addr) *dhcpv4.DHCPv4 {
	offer := must[*dhcpv4.DHCPv4](t)(dhcpv4.New(
		dhcpv4.WithHwAddr(mac), dhcpv4.WithMessageType(dhcpv4.MessageTypeOffer),
		dhcpv4.WithYourIP(ip4(ip)), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(ip4(sid)))))
	offer.OpCode = dhcpv4.OpcodeBootReply // NewRequestFromOffer flips it back
	return must[*dhcpv4.DHCPv4](t)(dhcpv4.NewRequestFromOffer(offer))
}

// TestDORAOptions runs DISCOVER → OFFER → REQUEST (NewRequestFromOffer) →
// ACK and decodes every option of the ACK back.
func TestDORAOptions(t *testing.T) {
	cfg := testConfig()
	cfg.Routes = []Route{{Dest: netip.MustParsePrefix("172.16.0.0/12"), Via: netip.MustParseAddr("10.98.0.254")}}
	fa := newFake(cniLease())
	h, _ := newTestHandler(t, cfg, fa)
	clientID := []byte{0xff, 0, 0, 0, 1, 0, 1, 0x12, 0x34}
	withID := dhcpv4.WithOption(dhcpv4.OptClientIdentifier(clientID))
	offer := handle(t, h, discover(t, cniMAC, withID))
	if offer == nil || offer.MessageType() != dhcpv4.MessageTypeOffer {
		t.Fatalf("offer = %v", offer)
	}
	ack := handle(t, h, must[*dhcpv4.DHCPv4](t)(dhcpv4.NewRequestFromOffer(offer, withID)))
	if ack == nil || ack.MessageType() != dhcpv4.MessageTypeAck {
		t.Fatalf("ack = %v", ack)
	}
	for _, r := range []*dhcpv4.DHCPv4{offer, ack} {
		checkOptions(t, r, true)
		if got := r.GetOneOption(dhcpv4.OptionClientIdentifier); !bytes.Equal(got, clientID) {
			t.Errorf("%s: client identifier = %x, want %x echoed (RFC 6842)", r.MessageType(), got, clientID)
		}
	}
	// Option 121 exactly as RFC 3442 encodes it: 172.16.0.0/12 via
	// 10.98.0.254 (width 12: two destination octets), then the default
	// route (width 0: no destination octets) last.
	want121 := []byte{12, 172, 16, 10, 98, 0, 254, 0, 10, 98, 0, 1}
	if got := ack.GetOneOption(dhcpv4.OptionClasslessStaticRoute); !bytes.Equal(got, want121) {
		t.Errorf("option 121 = %v, want %v", got, want121)
	}

	inform := handle(t, h, must[*dhcpv4.DHCPv4](t)(dhcpv4.NewInform(cniMAC, ip4(cniIP))))
	checkOptions(t, inform, false)
	if !inform.ClientIPAddr.Equal(ip4(cniIP)) {
		t.Errorf("INFORM ACK ciaddr = %s, want %s", inform.ClientIPAddr, cniIP)
	}
}

func checkOptions(t *testing.T, r *dhcpv4.DHCPv4, withLease bool) {
	t.Helper()
	mt := r.MessageType()
	if got := net.IP(r.GetOneOption(dhcpv4.OptionSubnetMask)); got.String() != "255.255.255.0" {
		t.Errorf("%s: mask = %v", mt, got)
	}
	if got := r.GetOneOption(dhcpv4.OptionRouter); !bytes.Equal(got, []byte{10, 98, 0, 1}) {
		t.Errorf("%s: router = %v (want 4 bytes)", mt, got)
	}
	if got := r.GetOneOption(dhcpv4.OptionDomainNameServer); !bytes.Equal(got, []byte{10, 96, 0, 10, 1, 1, 1, 1}) {
		t.Errorf("%s: dns = %v", mt, got)
	}
	if got := r.DomainName(); got != "cluster.local" {
		t.Errorf("%s: domain = %q", mt, got)
	}
	if got := r.DomainSearch(); got == nil || !cmp.Equal(got.Labels, []string{"default.svc.cluster.local", "svc.cluster.local"}) {
		t.Errorf("%s: search = %v", mt, got)
	}
	if got := r.GetOneOption(dhcpv4.OptionInterfaceMTU); !bytes.Equal(got, []byte{0x05, 0xaa}) {
		t.Errorf("%s: mtu = %v, want 1450", mt, got)
	}
	if got := r.GetOneOption(dhcpv4.OptionBroadcastAddress); !bytes.Equal(got, []byte{10, 98, 0, 255}) {
		t.Errorf("%s: broadcast = %v", mt, got)
	}
	if got := r.HostName(); got != "my-vm-pod" {
		t.Errorf("%s: hostname = %q, want the pod name as a label", mt, got)
	}
	routes := r.ClasslessStaticRoute()
	if len(routes) == 0 || routes[len(routes)-1].Dest.String() != "0.0.0.0/0" || !routes[len(routes)-1].Router.Equal(ip4(serverIP)) {
		t.Errorf("%s: routes = %v, want the default route via %s last", mt, routes, serverIP)
	}
	if withLease {
		for code, want := range map[dhcpv4.OptionCode]time.Duration{
			dhcpv4.OptionIPAddressLeaseTime: time.Hour,
			dhcpv4.OptionRenewTimeValue:     30 * time.Minute,
			dhcpv4.OptionRebindingTimeValue: 52*time.Minute + 30*time.Second,
		} {
			var d dhcpv4.Duration
			if err := d.FromBytes(r.GetOneOption(code)); err != nil || time.Duration(d) != want {
				t.Errorf("%s: option %s = %v (%v), want %s", mt, code, time.Duration(d), err, want)
			}
		}
	} else {
		for _, code := range []dhcpv4.OptionCode{dhcpv4.OptionIPAddressLeaseTime, dhcpv4.OptionRenewTimeValue, dhcpv4.OptionRebindingTimeValue} {
			if r.Options.Has(code) {
				t.Errorf("%s: carries %s, which an INFORM reply must not (RFC 2131 4.3.5)", mt, code)
			}
		}
		if !r.YourIPAddr.IsUnspecified() {
			t.Errorf("%s: yiaddr = %s, want 0", mt, r.YourIPAddr)
		}
	}
}

func TestNoRouterNoRoutes(t *testing.T) {
	cfg := testConfig()
	cfg.Router = netip.Addr{}
	cfg.MTU, cfg.Domain, cfg.Search, cfg.DNS = 0, "", nil, nil
	h, _ := newTestHandler(t, cfg, newFake(cniLease()))
	r := handle(t, h, discover(t, cniMAC))
	for _, code := range []dhcpv4.OptionCode{dhcpv4.OptionRouter, dhcpv4.OptionClasslessStaticRoute, dhcpv4.OptionInterfaceMTU, dhcpv4.OptionDomainName, dhcpv4.OptionDNSDomainSearchList, dhcpv4.OptionDomainNameServer} {
		if r.Options.Has(code) {
			t.Errorf("offer carries %s although it is not configured", code)
		}
	}
}

func TestStoreErrorMeansNoReply(t *testing.T) {
	fa := newFake(cniLease())
	fa.err = errors.New("disk full")
	h, d := newTestHandler(t, testConfig(), fa)
	r, err := h.Handle(discover(t, cniMAC))
	if err == nil || r != nil {
		t.Fatalf("Handle = %v, %v; want no reply and the error", r, err)
	}
	if !cmp.Equal(d.drop, []string{DropStoreError}) {
		t.Errorf("drops = %v", d.drop)
	}
}

func TestHostnameLabel(t *testing.T) {
	for in, want := range map[string]string{
		"web-0":                        "web-0",
		"My_VM.Pod":                    "my-vm-pod",
		"-lead-and-trail-":             "lead-and-trail",
		"":                             "",
		"...":                          "",
		strings.Repeat("a", 70):        strings.Repeat("a", 63),
		strings.Repeat("a", 62) + ".b": strings.Repeat("a", 62),
		"ünïcode":                      "n-code",
	} {
		if got := hostnameLabel(in); got != want {
			t.Errorf("hostnameLabel(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNewHandlerRejects(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"server outside subnet": func(c *Config) { c.ServerIP = netip.MustParseAddr("10.0.0.1") },
		"IPv6 subnet":           func(c *Config) { c.Subnet = netip.MustParsePrefix("fd00::/64") },
		"tiny MTU":              func(c *Config) { c.MTU = 67 },
		"range outside subnet": func(c *Config) {
			c.DynamicRange = &leases.Pool{First: netip.MustParseAddr("10.99.0.1"), Last: netip.MustParseAddr("10.99.0.9")}
		},
		"search label too long": func(c *Config) { c.Search = []string{strings.Repeat("x", 64) + ".com"} },
	} {
		cfg := testConfig()
		mod(&cfg)
		if _, err := NewHandler(cfg, newFake()); err == nil {
			t.Errorf("%s: NewHandler accepted it", name)
		}
	}
}

// TestLeaseEndRoundsUp: the lease file keeps whole seconds; a binding made
// at a fraction of a second must not end before the client's lease does.
func TestLeaseEndRoundsUp(t *testing.T) {
	at := time.Date(2026, 11, 22, 19, 58, 2, 1_000_000, time.UTC) // 19:58:02.001
	if got, want := leaseEnd(at, time.Minute), time.Date(2026, 11, 22, 19, 59, 3, 0, time.UTC); !got.Equal(want) {
		t.Errorf("leaseEnd(%s, 1m) = %s, want %s", at, got, want)
	}
	whole := time.Date(2026, 11, 22, 19, 58, 2, 0, time.UTC)
	if got := leaseEnd(whole, time.Minute); !got.Equal(whole.Add(time.Minute)) {
		t.Errorf("leaseEnd on a whole second = %s, want %s", got, whole.Add(time.Minute))
	}
}

// TestSearchTrailingDot: a search domain written fully qualified
// ("cluster.local.") encodes as the same name, not as that name plus the
// root domain (issue 12: option 119 carried an extra empty name).
func TestSearchTrailingDot(t *testing.T) {
	want := testConfig()
	dotted := testConfig()
	dotted.Search = []string{"default.svc.cluster.local.", "svc.cluster.local."}
	var opts [2][]byte
	for i, cfg := range []Config{want, dotted} {
		h, _ := newTestHandler(t, cfg, newFake())
		for _, o := range h.options(leases.Lease{}, false) {
			if o.Code == dhcpv4.OptionDNSDomainSearchList {
				opts[i] = o.Value.ToBytes()
			}
		}
	}
	if opts[0] == nil || !bytes.Equal(opts[0], opts[1]) {
		t.Errorf("option 119 with trailing dots = %x, want %x", opts[1], opts[0])
	}
	if dotted.Search[0] != "default.svc.cluster.local." {
		t.Errorf("the handler changed its caller's search list: %q", dotted.Search)
	}
}

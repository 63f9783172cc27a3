package dhcp

import (
	"io"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/vmlane/vmlane/leases"
)

var (
	t0       = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cniMAC   = net.HardwareAddr{0x02, 0x00, 0x0a, 0x62, 0x00, 0x32}
	otherMAC = net.HardwareAddr{0x02, 0x00, 0x0a, 0x62, 0x00, 0x99}
	cniIP    = netip.MustParseAddr("10.98.0.50")
	serverIP = netip.MustParseAddr("10.98.0.1")
)

func cniLease() leases.Lease {
	return leases.Lease{
		MAC: cniMAC.String(), IP: cniIP, State: leases.StateReserved, Source: leases.SourceCNI,
		ContainerID: "c1", IfName: "eth0", Pod: leases.Pod{Namespace: "default", Name: "My_VM.Pod"},
	}
}

func testConfig() Config {
	return Config{
		ServerIP:  serverIP,
		Subnet:    netip.MustParsePrefix("10.98.0.0/24"),
		Router:    serverIP,
		DNS:       []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("1.1.1.1")},
		Domain:    "cluster.local",
		Search:    []string{"default.svc.cluster.local", "svc.cluster.local"},
		MTU:       1450,
		LeaseTime: time.Hour,
	}
}

type drops struct{ drop, nak []string }

func newTestHandler(t *testing.T, cfg Config, a Allocator) (*Handler, *drops) {
	t.Helper()
	d := &drops{}
	h, err := NewHandler(cfg, a,
		WithClock(func() time.Time { return t0 }),
		WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		WithHooks(Hooks{
			Drop: func(r string) { d.drop = append(d.drop, r) },
			NAK:  func(r string) { d.nak = append(d.nak, r) },
		}))
	if err != nil {
		t.Fatal(err)
	}
	return h, d
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// Packet builders for the client states of RFC 2131 §4.3.2.

func discover(t *testing.T, mac net.HardwareAddr, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	return must[*dhcpv4.DHCPv4](t)(dhcpv4.NewDiscovery(mac, mods...))
}

func initReboot(t *testing.T, mac net.HardwareAddr, ip netip.Addr) *dhcpv4.DHCPv4 {
	return must[*dhcpv4.DHCPv4](t)(dhcpv4.New(
		dhcpv4.WithHwAddr(mac), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(ip4(ip))), dhcpv4.WithBroadcast(true)))
}

func renewing(t *testing.T, mac net.HardwareAddr, ciaddr netip.Addr) *dhcpv4.DHCPv4 {
	return must[*dhcpv4.DHCPv4](t)(dhcpv4.New(
		dhcpv4.WithHwAddr(mac), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithClientIP(ip4(ciaddr))))
}

func release(t *testing.T, mac net.HardwareAddr, ciaddr netip.Addr) *dhcpv4.DHCPv4 {
	return must[*dhcpv4.DHCPv4](t)(dhcpv4.New(
		dhcpv4.WithHwAddr(mac), dhcpv4.WithMessageType(dhcpv4.MessageTypeRelease),
		dhcpv4.WithClientIP(ip4(ciaddr)), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(ip4(serverIP)))))
}

func decline(t *testing.T, mac net.HardwareAddr, ip netip.Addr) *dhcpv4.DHCPv4 {
	return must[*dhcpv4.DHCPv4](t)(dhcpv4.New(
		dhcpv4.WithHwAddr(mac), dhcpv4.WithMessageType(dhcpv4.MessageTypeDecline),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(ip4(ip))), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(ip4(serverIP)))))
}

func handle(t *testing.T, h *Handler, req *dhcpv4.DHCPv4) *dhcpv4.DHCPv4 {
	t.Helper()
	// Every request goes through the wire format, as the server sees it.
	wire, err := dhcpv4.FromBytes(req.ToBytes())
	if err != nil {
		t.Fatal(err)
	}
	r, err := h.Handle(wire)
	if err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if r == nil {
		return nil
	}
	back, err := dhcpv4.FromBytes(r.ToBytes())
	if err != nil {
		t.Fatalf("reply does not parse: %v", err)
	}
	return back
}

func TestMessages(t *testing.T) {
	cfgRange := testConfig()
	cfgRange.DynamicRange = &leases.Pool{First: netip.MustParseAddr("10.98.0.200"), Last: netip.MustParseAddr("10.98.0.201")}
	until := t0.Add(time.Hour).Format(time.RFC3339)
	tests := []struct {
		name      string
		cfg       Config
		req       func(t *testing.T) *dhcpv4.DHCPv4
		wantType  dhcpv4.MessageType // MessageTypeNone: no reply
		wantYI    string
		wantCalls []string
		wantDrop  []string
		wantNAK   []string
	}{{
		name:     "discover reserved MAC",
		cfg:      testConfig(),
		req:      func(t *testing.T) *dhcpv4.DHCPv4 { return discover(t, cniMAC) },
		wantType: dhcpv4.MessageTypeOffer, wantYI: "10.98.0.50",
	}, {
		name:     "discover unknown MAC without range is dropped",
		cfg:      testConfig(),
		req:      func(t *testing.T) *dhcpv4.DHCPv4 { return discover(t, otherMAC) },
		wantDrop: []string{DropUnknownMAC},
	}, {
		name:     "discover unknown MAC with range gets a held dynamic address",
		cfg:      cfgRange,
		req:      func(t *testing.T) *dhcpv4.DHCPv4 { return discover(t, otherMAC) },
		wantType: dhcpv4.MessageTypeOffer, wantYI: "10.98.0.200",
		wantCalls: []string{"allocate 02:00:0a:62:00:99 want=invalid IP pool=10.98.0.200-10.98.0.201 hold=2026-01-02T03:05:05Z"},
	}, {
		name: "discover with requested address in range gets it",
		cfg:  cfgRange,
		req: func(t *testing.T) *dhcpv4.DHCPv4 {
			return discover(t, otherMAC, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 98, 0, 201))))
		},
		wantType: dhcpv4.MessageTypeOffer, wantYI: "10.98.0.201",
		wantCalls: []string{"allocate 02:00:0a:62:00:99 want=10.98.0.201 pool=10.98.0.200-10.98.0.201 hold=2026-01-02T03:05:05Z"},
	}, {
		name: "selecting ours, right address: ACK",
		cfg:  testConfig(),
		req: func(t *testing.T) *dhcpv4.DHCPv4 {
			return selecting(t, cniMAC, serverIP, cniIP)
		},
		wantType: dhcpv4.MessageTypeAck, wantYI: "10.98.0.50",
		wantCalls: []string{`bind 02:00:0a:62:00:32 10.98.0.50 until=` + until + ` host="my-vm-pod"`},
	}, {
		name: "selecting another server: silent",
		cfg:  testConfig(),
		req: func(t *testing.T) *dhcpv4.DHCPv4 {
			return selecting(t, cniMAC, netip.MustParseAddr("10.98.0.2"), cniIP)
		},
		wantDrop: []string{DropOtherServer},
	}, {
		name: "selecting ours, wrong address: NAK",
		cfg:  testConfig(),
		req: func(t *testing.T) *dhcpv4.DHCPv4 {
			return selecting(t, cniMAC, serverIP, netip.MustParseAddr("10.98.0.51"))
		},
		wantType: dhcpv4.MessageTypeNak, wantNAK: []string{NAKWrongAddress},
	}, {
		name: "selecting ours, unknown MAC, no range: NAK",
		cfg:  testConfig(),
		req: func(t *testing.T) *dhcpv4.DHCPv4 {
			return selecting(t, otherMAC, serverIP, cniIP)
		},
		wantType: dhcpv4.MessageTypeNak, wantNAK: []string{NAKNoLease},
	}, {
		name: "selecting after the offer expired re-takes a free range address",
		cfg:  cfgRange,
		req: func(t *testing.T) *dhcpv4.DHCPv4 {
			return selecting(t, otherMAC, serverIP, netip.MustParseAddr("10.98.0.201"))
		},
		wantType: dhcpv4.MessageTypeAck, wantYI: "10.98.0.201",
		wantCalls: []string{
			"allocate 02:00:0a:62:00:99 want=10.98.0.201 pool=10.98.0.200-10.98.0.201 hold=2026-01-02T03:05:05Z",
			`bind 02:00:0a:62:00:99 10.98.0.201 until=` + until + ` host=""`,
		},
	}, {
		name:     "init-reboot right address: ACK",
		cfg:      testConfig(),
		req:      func(t *testing.T) *dhcpv4.DHCPv4 { return initReboot(t, cniMAC, cniIP) },
		wantType: dhcpv4.MessageTypeAck, wantYI: "10.98.0.50",
		wantCalls: []string{`bind 02:00:0a:62:00:32 10.98.0.50 until=` + until + ` host="my-vm-pod"`},
	}, {
		name:     "init-reboot wrong address: NAK",
		cfg:      testConfig(),
		req:      func(t *testing.T) *dhcpv4.DHCPv4 { return initReboot(t, cniMAC, netip.MustParseAddr("10.98.0.77")) },
		wantType: dhcpv4.MessageTypeNak, wantNAK: []string{NAKWrongAddress},
	}, {
		name:     "init-reboot from another network: NAK",
		cfg:      testConfig(),
		req:      func(t *testing.T) *dhcpv4.DHCPv4 { return initReboot(t, cniMAC, netip.MustParseAddr("192.168.1.7")) },
		wantType: dhcpv4.MessageTypeNak, wantNAK: []string{NAKWrongNetwork},
	}, {
		name:     "init-reboot unknown MAC: silent (RFC 2131 4.3.2)",
		cfg:      testConfig(),
		req:      func(t *testing.T) *dhcpv4.DHCPv4 { return initReboot(t, otherMAC, cniIP) },
		wantDrop: []string{DropNoRecord},
	}, {
		name:     "renewing right ciaddr: ACK",
		cfg:      testConfig(),
		req:      func(t *testing.T) *dhcpv4.DHCPv4 { return renewing(t, cniMAC, cniIP) },
		wantType: dhcpv4.MessageTypeAck, wantYI: "10.98.0.50",
		wantCalls: []string{`bind 02:00:0a:62:00:32 10.98.0.50 until=` + until + ` host="my-vm-pod"`},
	}, {
		name:     "renewing wrong ciaddr: NAK",
		cfg:      testConfig(),
		req:      func(t *testing.T) *dhcpv4.DHCPv4 { return renewing(t, cniMAC, netip.MustParseAddr("10.98.0.60")) },
		wantType: dhcpv4.MessageTypeNak, wantNAK: []string{NAKWrongAddress},
	}, {
		name:     "rebinding unknown MAC: NAK",
		cfg:      testConfig(),
		req:      func(t *testing.T) *dhcpv4.DHCPv4 { return renewing(t, otherMAC, cniIP) },
		wantType: dhcpv4.MessageTypeNak, wantNAK: []string{NAKNoLease},
	}, {
		name: "request with nothing to go on is malformed",
		cfg:  testConfig(),
		req: func(t *testing.T) *dhcpv4.DHCPv4 {
			return must[*dhcpv4.DHCPv4](t)(dhcpv4.New(dhcpv4.WithHwAddr(cniMAC), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest)))
		},
		wantDrop: []string{DropMalformed},
	}, {
		name:      "release",
		cfg:       testConfig(),
		req:       func(t *testing.T) *dhcpv4.DHCPv4 { return release(t, cniMAC, cniIP) },
		wantCalls: []string{"release 02:00:0a:62:00:32"},
	}, {
		name:     "release of an address the MAC does not hold is ignored",
		cfg:      testConfig(),
		req:      func(t *testing.T) *dhcpv4.DHCPv4 { return release(t, cniMAC, netip.MustParseAddr("10.98.0.9")) },
		wantDrop: []string{DropNotLeased},
	}, {
		name:      "decline quarantines for 10 minutes",
		cfg:       testConfig(),
		req:       func(t *testing.T) *dhcpv4.DHCPv4 { return decline(t, cniMAC, cniIP) },
		wantCalls: []string{"decline 02:00:0a:62:00:32 10.98.0.50 until=2026-01-02T03:14:05Z"},
	}, {
		name:     "decline of someone else's address is ignored",
		cfg:      testConfig(),
		req:      func(t *testing.T) *dhcpv4.DHCPv4 { return decline(t, otherMAC, cniIP) },
		wantDrop: []string{DropNotLeased},
	}, {
		name: "inform: ACK without address",
		cfg:  testConfig(),
		req: func(t *testing.T) *dhcpv4.DHCPv4 {
			return must[*dhcpv4.DHCPv4](t)(dhcpv4.NewInform(otherMAC, net.IPv4(10, 98, 0, 9)))
		},
		wantType: dhcpv4.MessageTypeAck, wantYI: "0.0.0.0",
	}, {
		name: "bootreply dropped",
		cfg:  testConfig(),
		req: func(t *testing.T) *dhcpv4.DHCPv4 {
			d := discover(t, cniMAC)
			d.OpCode = dhcpv4.OpcodeBootReply
			return d
		},
		wantDrop: []string{DropBootReply},
	}, {
		name: "hlen 8 dropped",
		cfg:  testConfig(),
		req: func(t *testing.T) *dhcpv4.DHCPv4 {
			return discover(t, net.HardwareAddr{2, 0, 0, 0, 0, 1, 2, 3})
		},
		wantDrop: []string{DropHardware},
	}, {
		name: "non-Ethernet htype dropped",
		cfg:  testConfig(),
		req: func(t *testing.T) *dhcpv4.DHCPv4 {
			return discover(t, cniMAC, dhcpv4.WithHWType(iana.HWTypeInfiniband))
		},
		wantDrop: []string{DropHardware},
	}, {
		name: "plain BOOTP dropped",
		cfg:  testConfig(),
		req: func(t *testing.T) *dhcpv4.DHCPv4 {
			d := discover(t, cniMAC)
			d.Options.Del(dhcpv4.OptionDHCPMessageType)
			return d
		},
		wantDrop: []string{DropMalformed},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fa := newFake(cniLease())
			h, d := newTestHandler(t, tt.cfg, fa)
			r := handle(t, h, tt.req(t))
			if tt.wantType == dhcpv4.MessageTypeNone {
				if r != nil {
					t.Fatalf("got reply %s, want none", r.Summary())
				}
			} else {
				if r == nil {
					t.Fatalf("got no reply, want %s (drops %v)", tt.wantType, d.drop)
				}
				if r.MessageType() != tt.wantType {
					t.Fatalf("got %s, want %s", r.MessageType(), tt.wantType)
				}
				if r.OpCode != dhcpv4.OpcodeBootReply {
					t.Errorf("op = %s", r.OpCode)
				}
				if got := r.ServerIdentifier(); !got.Equal(ip4(serverIP)) {
					t.Errorf("server identifier = %v, want %s (always, also on NAK)", got, serverIP)
				}
				if tt.wantType == dhcpv4.MessageTypeNak {
					if !r.YourIPAddr.IsUnspecified() || r.Options.Has(dhcpv4.OptionIPAddressLeaseTime) {
						t.Errorf("NAK carries an address or lease: %s", r.Summary())
					}
				} else if got := r.YourIPAddr.String(); got != tt.wantYI {
					t.Errorf("yiaddr = %s, want %s", got, tt.wantYI)
				}
			}
			if diff := cmp.Diff(tt.wantCalls, fa.calls); diff != "" {
				t.Errorf("allocator calls (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantDrop, d.drop); diff != "" {
				t.Errorf("drops (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantNAK, d.nak); diff != "" {
				t.Errorf("NAK reasons (-want +got):\n%s", diff)
			}
		})
	}
}

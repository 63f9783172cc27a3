package dhcp

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/vmlane/vmlane/leases"
)

// newerLeases is a lease file a newer vmlane wrote: cniMAC's reservation
// in a state this version does not know, a lease of a source it does not
// know in the dynamic range, and an expired one of an unknown state there
// whose MAC has a declined dynamic lease too.
const newerLeases = `{"version":1,"subnet":"10.98.0.0/24","gateway":"10.98.0.1","leases":[
  {"mac":"02:00:0a:62:00:32","ip":"10.98.0.50","state":"quarantined","source":"cni","containerID":"c1","ifname":"eth0","pod":{"namespace":"vms","name":"vm-q"},"created":"2026-01-01T00:00:00Z"},
  {"mac":"52:54:00:00:00:c9","ip":"10.98.0.60","state":"declined","source":"dhcp","created":"2026-01-01T00:00:00Z","expires":"2026-01-05T00:00:00Z"},
  {"mac":"52:54:00:00:00:c8","ip":"10.98.0.200","state":"bound","source":"kubevirt","hostname":"vmi-k","created":"2026-01-01T00:00:00Z","expires":"2026-01-03T00:00:00Z","vmi":"vms/vmi-k"},
  {"mac":"52:54:00:00:00:c9","ip":"10.98.0.201","state":"parked","source":"dhcp","created":"2026-01-01T00:00:00Z","expires":"2026-01-01T12:00:00Z"}
]}
`

// TestNewerVmlanesLeasesAreNotServed: the server answers none of the MACs
// of leases this version does not know, counts why, never offers their
// addresses to anyone, and changes none of them, whatever the client
// sends.
func TestNewerVmlanesLeasesAreNotServed(t *testing.T) {
	kubevirtMAC := net.HardwareAddr{0x52, 0x54, 0x00, 0x00, 0x00, 0xc8}
	parkedMAC := net.HardwareAddr{0x52, 0x54, 0x00, 0x00, 0x00, 0xc9}
	for _, name := range []string{"cached", "locked"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "leases.json")
			if err := os.WriteFile(path, []byte(newerLeases), 0o644); err != nil {
				t.Fatal(err)
			}
			st, err := leases.Open(path, netip.MustParsePrefix("10.98.0.0/24"), serverIP, leases.WithClock(func() time.Time { return t0 }))
			if err != nil {
				t.Fatal(err)
			}
			a := StoreAllocator{Store: st}
			if name == "cached" {
				a = NewStoreAllocator(st)
			}
			cfg := testConfig()
			cfg.DynamicRange = &leases.Pool{First: netip.MustParseAddr("10.98.0.200"), Last: netip.MustParseAddr("10.98.0.202")}
			h, d := newTestHandler(t, cfg, a)

			for _, mac := range []net.HardwareAddr{cniMAC, kubevirtMAC, parkedMAC} {
				if r := handle(t, h, discover(t, mac)); r != nil {
					t.Errorf("DISCOVER from %s: %v %s, want no reply", mac, r.MessageType(), r.YourIPAddr)
				}
			}
			if want := []string{DropUnknownLease, DropUnknownLease, DropUnknownLease}; !cmp.Equal(d.drop, want) {
				t.Errorf("drop reasons %v, want %v", d.drop, want)
			}
			if r := handle(t, h, selecting(t, cniMAC, serverIP, cniIP)); r == nil || r.MessageType() != dhcpv4.MessageTypeNak {
				t.Errorf("SELECTING of the unknown reservation: %v, want a NAK", r)
			}
			if r := handle(t, h, selecting(t, kubevirtMAC, serverIP, netip.MustParseAddr("10.98.0.200"))); r == nil || r.MessageType() != dhcpv4.MessageTypeNak {
				t.Errorf("SELECTING of the kubevirt lease's address: %v, want a NAK", r)
			}
			for _, req := range []*dhcpv4.DHCPv4{
				initReboot(t, cniMAC, cniIP),
				renewing(t, cniMAC, cniIP),
				release(t, cniMAC, cniIP),
				decline(t, cniMAC, cniIP),
			} {
				if r := handle(t, h, req); r != nil && r.MessageType() != dhcpv4.MessageTypeNak {
					t.Errorf("%v from the unknown reservation's MAC: %v, want a NAK or nothing", req.MessageType(), r.MessageType())
				}
			}
			inform := must[*dhcpv4.DHCPv4](t)(dhcpv4.New(dhcpv4.WithHwAddr(kubevirtMAC),
				dhcpv4.WithMessageType(dhcpv4.MessageTypeInform), dhcpv4.WithClientIP(net.IPv4(10, 98, 0, 200))))
			if r := handle(t, h, inform); r == nil || r.HostName() != "" {
				t.Errorf("INFORM from the kubevirt lease's MAC: %v, want an ACK without its host name", r)
			}

			// The dynamic range has one address left that no lease
			// holds; another client gets that one, then none.
			offer := handle(t, h, discover(t, otherMAC))
			if offer == nil || addrOf(offer.YourIPAddr) != netip.MustParseAddr("10.98.0.202") {
				t.Fatalf("dynamic OFFER: %v, want 10.98.0.202", offer)
			}
			if r := handle(t, h, discover(t, net.HardwareAddr{0x02, 0, 0, 0, 0, 0x77})); r != nil {
				t.Errorf("a second dynamic client got %s: the range has no address left", r.YourIPAddr)
			}

			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(newerLeases, "\n")[1:5] {
				if !strings.Contains(string(data), strings.TrimSuffix(line, ",")) {
					t.Errorf("the file lost or changed\n%s\nit is:\n%s", line, data)
				}
			}
		})
	}
}

package vmnet_test

import (
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	"github.com/vmlane/vmlane/internal/testing/vmnetfake"
	"github.com/vmlane/vmlane/pf"
	"github.com/vmlane/vmlane/pf/vmnet"
)

// FuzzNetworkDescription: whatever vmlane-vmnet finds in the network
// description (vmlaned writes it, but it is a file on disk), SpecFrom
// accepts it or names the problem, and an accepted one goes through
// Create against the fake without leaving anything held on failure or
// serving a subnet other than the one asked for.
func FuzzNetworkDescription(f *testing.F) {
	f.Add([]byte(`{"version":1,"mode":"shared","subnet":"10.244.5.0/24","gateway":"10.244.5.1","mask":"255.255.255.0","mtu":1500,` +
		`"ipv6Prefix":"fd00:10:244:5::/64","reservations":[{"mac":"02:00:0a:f4:05:07","ip":"10.244.5.7"}]}`))
	f.Add([]byte(`{"version":1,"mode":"shared","subnet":"10.244.5.0/24","reservations":[{"mac":"zz","ip":"fd00::1"}]}`))
	f.Add([]byte(`{"version":1,"mode":"shared","subnet":"0.0.0.0/0"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var n pf.Network
		if json.Unmarshal(data, &n) != nil {
			return
		}
		s, err := vmnet.SpecFrom(n, vmnet.Options{})
		if err != nil {
			return
		}
		api := vmnetfake.New()
		h, err := vmnet.Create(api, s)
		if err != nil {
			if held := api.Held(); len(held) != 0 {
				t.Fatalf("%v, and still held: %v", err, held)
			}
			return
		}
		if h.Subnet != s.Subnet || (s.IPv6.IsValid() && h.IPv6 != s.IPv6) {
			t.Fatalf("served %s %s for %s %s", h.Subnet, h.IPv6, s.Subnet, s.IPv6)
		}
		h.Release(api)
		if held := api.Held(); len(held) != 0 {
			t.Fatalf("after Release: %v", held)
		}
	})
}

// FuzzParseState: vmlaned reads vmlane-vmnet's state file every resync;
// whatever it holds, ParseState and CheckState answer without a panic,
// and only a state on the podCIDR is Served.
func FuzzParseState(f *testing.F) {
	f.Add([]byte(`{"version":1,"pid":7,"updated":"2026-11-28T08:00:00Z","service":"dev.vmlane.vmnet","network":"pod","phase":"serving","want":"10.244.5.0/24","subnet":"10.244.5.0/24","clients":1}`))
	f.Add([]byte(`{"version":1,"phase":"refused","want":"10.244.5.0/24","subnet":"192.168.64.0/24"}`))
	f.Add([]byte(`{"version":2}`))
	pod := netip.MustParsePrefix("10.244.5.0/24")
	now := time.Date(2026, 11, 28, 8, 0, 5, 0, time.UTC)
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := vmnet.ParseState(data)
		v, msg := vmnet.CheckState(st, err, pod, now)
		if msg == "" {
			t.Fatal("no message")
		}
		if v == vmnet.Served && (err != nil || st.Subnet != pod || st.Phase != vmnet.PhaseServing) {
			t.Fatalf("served: %+v %v", st, err)
		}
	})
}

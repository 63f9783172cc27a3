package pf

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestCheckBridge(t *testing.T) {
	ifc := func(name string, addrs ...string) Iface {
		i := Iface{Name: name}
		for _, a := range addrs {
			i.Addrs = append(i.Addrs, netip.MustParsePrefix(a))
		}
		return i
	}
	lo := ifc("lo0", "127.0.0.1/8", "::1/128")
	en0 := ifc("en0", "192.168.1.20/24")
	tb := ifc("bridge0") // Thunderbolt Bridge, no address
	unknown := SharedNAT{}
	for _, tc := range []struct {
		name   string
		ifaces []Iface
		want   BridgeState
		msg    string
	}{
		{"no VM yet", []Iface{lo, en0, tb}, BridgeDown, "not up"},
		{"on the podCIDR", []Iface{lo, en0, tb, ifc("bridge100", "10.244.5.1/24", "fe80::1/64")}, BridgeMatch, "bridge100 10.244.5.1/24"},
		{"vmnet moved", []Iface{lo, en0, ifc("bridge100", "192.168.65.1/24")}, BridgeMismatch, "want gateway 10.244.5.1/24 on a vmnet bridge, have bridge100 192.168.65.1/24"},
		{"right address, wrong mask", []Iface{ifc("bridge100", "10.244.5.1/16")}, BridgeMismatch, "have bridge100 10.244.5.1/16"},
		{"host-only bridge beside the shared one", []Iface{ifc("bridge101", "192.168.128.1/24"), ifc("bridge100", "10.244.5.1/24")}, BridgeMatch, "bridge100 10.244.5.1/24, bridge101 192.168.128.1/24"},
		{"user bridge with the gateway is not vmnet's", []Iface{ifc("bridge1", "10.244.5.1/24")}, BridgeDown, "not up"},
	} {
		st := CheckBridge(tc.ifaces, podCIDR, unknown)
		if st.State != tc.want || !strings.Contains(st.Message(podCIDR), tc.msg) {
			t.Errorf("%s: state %v, message %q; want %v containing %q", tc.name, st.State, st.Message(podCIDR), tc.want, tc.msg)
		}
	}
}

// natShown is `pfctl -a com.apple.internet-sharing/shared_v4 -s nat` with
// the shared network on subnet (gateway gw, bridge br), as reported from
// macOS hosts running UTM and tart.
func natShown(br, gw, subnet string) string {
	return "No ALTQ support in kernel\nALTQ related functions disabled\n" +
		"nat on en0 inet from " + subnet + " to any -> (en0:0) extfilter ei\n" +
		"no nat on " + br + " inet from " + gw + " to " + subnet + "\n"
}

func TestParseSharedNAT(t *testing.T) {
	n := ParseSharedNAT(natShown("bridge100", "192.168.64.1", "192.168.64.0/24"))
	if !n.Known || !slices.Equal(n.Bridges, []string{"bridge100"}) || !slices.Equal(n.Subnets, []netip.Prefix{netip.MustParsePrefix("192.168.64.0/24")}) {
		t.Errorf("ParseSharedNAT = %+v", n)
	}
	if n := ParseSharedNAT("No ALTQ support in kernel\nALTQ related functions disabled\n"); !n.Known || len(n.Bridges)+len(n.Subnets) != 0 {
		t.Errorf("an empty anchor: %+v, want known and empty", n)
	}
}

// TestCheckBridgeTellsSharedFromHostOnly: with InternetSharing's NAT
// anchor read, a host-only vmnet network says nothing of the shared one:
// up alone it is no mismatch (which would keep every pod, and so every VM
// that would start the shared network, off the node), and beside the
// shared one only the shared one counts.
func TestCheckBridgeTellsSharedFromHostOnly(t *testing.T) {
	hostOnly := Iface{Name: "bridge100", Addrs: []netip.Prefix{netip.MustParsePrefix("192.168.128.1/24")}}
	sharedOn := func(name, addr string) Iface {
		return Iface{Name: name, Addrs: []netip.Prefix{netip.MustParsePrefix(addr)}}
	}
	for _, tc := range []struct {
		name   string
		ifaces []Iface
		nat    string
		want   BridgeState
		msg    string
	}{
		{"host-only up, shared down", []Iface{hostOnly}, "", BridgeDown, "host-only networks up: bridge100 192.168.128.1/24"},
		{"host-only and shared on the podCIDR", []Iface{hostOnly, sharedOn("bridge101", "10.244.5.1/24")}, natShown("bridge101", "10.244.5.1", "10.244.5.0/24"), BridgeMatch, "(bridge101 10.244.5.1/24)"},
		{"host-only and shared moved", []Iface{hostOnly, sharedOn("bridge101", "192.168.64.1/24")}, natShown("bridge101", "192.168.64.1", "192.168.64.0/24"), BridgeMismatch, "have bridge101 192.168.64.1/24."},
		{"shared found by its subnet alone", []Iface{hostOnly, sharedOn("bridge102", "192.168.64.1/24")}, "nat on en0 inet from 192.168.64.0/24 to any -> (en0:0)\n", BridgeMismatch, "have bridge102 192.168.64.1/24."},
		{"the gateway on a host-only bridge is no match", []Iface{sharedOn("bridge100", "10.244.5.1/24"), sharedOn("bridge101", "192.168.64.1/24")}, natShown("bridge101", "192.168.64.1", "192.168.64.0/24"), BridgeMismatch, "have bridge101 192.168.64.1/24."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := CheckBridge(tc.ifaces, podCIDR, ParseSharedNAT(tc.nat))
			if st.State != tc.want || !strings.Contains(st.Message(podCIDR), tc.msg) {
				t.Errorf("state %v, message %q; want %v containing %q", st.State, st.Message(podCIDR), tc.want, tc.msg)
			}
		})
	}
}

// TestReadSharedNAT reads the anchor through the command seam, as vmlaned
// does on a Mac, from the fake pfctl.
func TestReadSharedNAT(t *testing.T) {
	f := newFakePfctl()
	f.anchors[SharedNATAnchor] = ParseShownRules(natShown("bridge100", "192.168.64.1", "192.168.64.0/24"))
	n, err := ReadSharedNAT(f)
	if err != nil || !slices.Equal(n.Bridges, []string{"bridge100"}) || len(n.Subnets) != 1 {
		t.Errorf("ReadSharedNAT = %+v, %v", n, err)
	}
	f.failOn = "pfctl -a " + SharedNATAnchor
	if n, err := ReadSharedNAT(f); err == nil || n.Known {
		t.Errorf("a failed pfctl: %+v, %v; want an error and nothing known", n, err)
	}
}

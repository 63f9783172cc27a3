package pf

import (
	"net/netip"
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
		st := CheckBridge(tc.ifaces, podCIDR)
		if st.State != tc.want || !strings.Contains(st.Message(podCIDR), tc.msg) {
			t.Errorf("%s: state %v, message %q; want %v containing %q", tc.name, st.State, st.Message(podCIDR), tc.want, tc.msg)
		}
	}
}

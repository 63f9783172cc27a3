package routes

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vmlane/vmlane/internal/testing/frametest"
	"github.com/vmlane/vmlane/internal/testing/netnstest"
)

// vxlanPacket is a VXLAN packet's UDP payload: the header with vni, then
// an Ethernet frame to dst (MAC) carrying a UDP packet from src to pod
// with mark as its payload.
func vxlanPacket(vni int, dst net.HardwareAddr, src, pod netip.Addr, mark []byte) []byte {
	h := make([]byte, 8)
	h[0] = 0x08 // the I flag: the VNI is valid
	binary.BigEndian.PutUint32(h[4:], uint32(vni)<<8)
	inner := frametest.Ether(dst, net.HardwareAddr{0x02, 0xbd, 0, 0, 0, 1}, frametest.TypeIPv4, frametest.UDP4(src, pod, 9, 9, mark))
	return append(h, inner...)
}

// sendUDP sends payload from ns to dst:port.
func sendUDP(t *testing.T, ns *netnstest.NS, dst netip.Addr, port int, payload []byte) {
	t.Helper()
	if err := ns.Do(func() error {
		c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, uint16(port))))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write(payload)
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// TestKernelVXLANFromStrangers: node c accepts VXLAN only from the peers
// whose FDB entries it has. A packet from peer a reaches the pod on c it
// is for; the same packet from the router (an address that reaches c's
// port but is no peer) and from a pod on c's own bridge, sent to c's
// underlay address, is dropped, and reaches the pod once the filter is
// gone (so the filter is what stops it); RemoveVXLAN takes the filter.
func TestKernelVXLANFromStrangers(t *testing.T) {
	r, a, c := twoSubnets(t)
	nodes := []Node{
		{Name: "a", PodCIDRs: []netip.Prefix{a.pod}, Addrs: []netip.Addr{a.ip4}},
		{Name: "c", PodCIDRs: []netip.Prefix{c.pod}, Addrs: []netip.Addr{c.ip4}},
	}
	syncTunnel(t, a, nodes, a.ip4)
	syncTunnel(t, c, nodes, c.ip4)
	c.ns.MustRun(t, "sysctl", "-qw", "net.ipv4.ip_forward=1")

	// A pod on c's bridge, the target, and one that sends.
	pod := netnstest.New(t, "pod")
	podIP := netip.MustParseAddr("10.244.13.5")
	c.ns.MustRun(t, "ip", "link", "add", "vpod", "type", "veth", "peer", "name", "eth0", "netns", pod.Name)
	c.ns.MustRun(t, "ip", "link", "set", "vpod", "master", "br0", "up")
	pod.MustRun(t, "ip", "addr", "add", podIP.String()+"/24", "dev", "eth0")
	pod.MustRun(t, "ip", "link", "set", "eth0", "up")
	pod.MustRun(t, "ip", "route", "add", "default", "via", c.pod.Addr().Next().String())
	sock := frametest.OpenIn(t, pod, "eth0")

	// Each packet claims to come from a pod of node a, as the tunnel
	// would carry one.
	fromA := netip.MustParseAddr("10.244.11.7")
	arrives := func(from *netnstest.NS, name string) bool {
		t.Helper()
		mark := []byte("vmlane vxlan filter test: " + name)
		sendUDP(t, from, c.ip4, DefaultVXLANPort, vxlanPacket(DefaultVXLANVNI, VTEPMAC(c.ip4), fromA, podIP, mark))
		_, err := sock.Wait(time.Second, func(f []byte) bool { return bytes.Contains(f, mark) })
		return err == nil
	}
	if !arrives(a.ns, "peer") {
		t.Fatal("VXLAN from peer a did not reach the pod on c: the test cannot show anything is dropped")
	}
	senders := []struct {
		name string
		ns   *netnstest.NS
	}{{"router", r}, {"pod on c's bridge", pod}}
	for _, s := range senders {
		if arrives(s.ns, s.name) {
			t.Errorf("VXLAN from the %s reached the pod on c", s.name)
		}
	}
	if out := c.ns.MustRun(t, "bridge", "fdb", "show", "dev", "vmlane.vxlan"); !strings.Contains(out, a.ip4.String()) {
		t.Errorf("c's FDB has no entry for a:\n%s", out)
	}

	// Without the filter, both get through.
	if err := c.ns.Do(func() error {
		conn, err := nftables.New()
		if err != nil {
			return err
		}
		conn.DelTable(&nftables.Table{Name: VXLANFilterTable, Family: nftables.TableFamilyINet})
		return conn.Flush()
	}); err != nil {
		t.Fatal(err)
	}
	for _, s := range senders {
		if !arrives(s.ns, s.name+" unfiltered") {
			t.Errorf("without the filter, VXLAN from the %s did not reach the pod: the filter is not what stops it", s.name)
		}
	}
	// The next reconcile writes it again.
	syncTunnel(t, c, nodes, c.ip4)
	if arrives(r, "router again") {
		t.Error("after a reconcile, VXLAN from the router reached the pod again")
	}
	if err := c.ns.Do(func() error { _, err := RemoveVXLAN(""); return err }); err != nil {
		t.Fatal(err)
	}
	if err := c.ns.Do(func() error {
		conn, err := nftables.New()
		if err != nil {
			return err
		}
		if _, err := conn.ListTableOfFamily(VXLANFilterTable, nftables.TableFamilyINet); err == nil {
			t.Error("RemoveVXLAN left the filter")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

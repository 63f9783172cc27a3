package dhcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/vmlane/vmlane/internal/rawip"
	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/privtest"
	"github.com/vmlane/vmlane/leases"
)

// TestRenewalForAnotherServer: a guest that moved here (its address of
// another node's pod subnet, its server identifier that node's bridge
// address) renews by unicast to its home's server; this node's server
// ACKs it, naming itself. Without the packet socket the kernel forwarded
// the request and no server answered. A renewal of an address that is not
// the MAC's here gets no reply at all (no NAK: the other server's to
// give), and a request to one of the node's own addresses, or its
// subnet's broadcast, is answered once, by the UDP socket.
func TestRenewalForAnotherServer(t *testing.T) {
	privtest.Require(t, "ip")
	srv := netnstest.New(t, "desrv")
	cli := netnstest.New(t, "decli")
	const mac = "02:00:0a:62:01:32"
	gatewayBridge(t, srv, "10.98.0.1/24", "brd", "+")
	srv.MustRun(t, "ip", "addr", "add", "10.98.5.5/32", "dev", "lo")
	srv.MustRun(t, "ip", "link", "add", "vh0", "type", "veth", "peer", "name", "eth0", "netns", cli.Name)
	srv.MustRun(t, "ip", "link", "set", "vh0", "master", "br0", "up")
	// The VM's host route onto the bridge, as vmlaned's for a VM that
	// moved in.
	srv.MustRun(t, "ip", "route", "add", "10.98.1.50/32", "dev", "br0")
	cli.MustRun(t, "ip", "link", "set", "eth0", "address", mac, "up")
	cli.MustRun(t, "ip", "addr", "add", "10.98.1.50/24", "dev", "eth0")
	cli.MustRun(t, "ip", "addr", "add", "10.98.1.51/24", "dev", "eth0")
	// Its home gateway, by the MAC every node's bridge has.
	cli.MustRun(t, "ip", "neigh", "add", "10.98.1.1", "lladdr", gatewayMAC, "dev", "eth0")
	cli.MustRun(t, "ip", "route", "add", "default", "via", "10.98.1.1")

	serveOn(t, srv, testConfig(), leases.ReserveRequest{
		Key: leases.Key{ContainerID: "c1", IfName: "eth0"}, MAC: mac, IP: netip.MustParseAddr("10.98.1.50"),
		VMName: "default/vm-a", Home: netip.MustParsePrefix("10.98.1.0/24"),
		Pod: leases.Pod{Namespace: "default", Name: "vm-a"},
	})
	hw, _ := net.ParseMAC(mac)

	// renew sends a RENEWING REQUEST from ciaddr:68 to server:67 and
	// returns the replies that came within wait: unicast to ciaddr, or
	// broadcast (a NAK).
	renew := func(ciaddr, server string, wait time.Duration) []*dhcpv4.DHCPv4 {
		t.Helper()
		var got []*dhcpv4.DHCPv4
		err := cli.Do(func() error {
			lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
				var serr error
				err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1) })
				return errors.Join(err, serr)
			}}
			var pcs []net.PacketConn
			defer func() {
				for _, pc := range pcs {
					pc.Close()
				}
			}()
			for _, a := range []string{ciaddr, "0.0.0.0"} {
				pc, err := lc.ListenPacket(context.Background(), "udp4", net.JoinHostPort(a, "68"))
				if err != nil {
					return err
				}
				pcs = append(pcs, pc)
			}
			req, err := dhcpv4.New(dhcpv4.WithHwAddr(hw), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
				dhcpv4.WithClientIP(net.ParseIP(ciaddr)))
			if err != nil {
				return err
			}
			if _, err := pcs[0].WriteTo(req.ToBytes(), &net.UDPAddr{IP: net.ParseIP(server), Port: 67}); err != nil {
				return err
			}
			replies := make(chan []*dhcpv4.DHCPv4, len(pcs))
			for _, pc := range pcs {
				pc.SetReadDeadline(time.Now().Add(wait))
				go func() {
					var ms []*dhcpv4.DHCPv4
					buf := make([]byte, 1500)
					for {
						n, _, err := pc.ReadFrom(buf)
						if err != nil {
							replies <- ms // the deadline
							return
						}
						if m, err := dhcpv4.FromBytes(buf[:n]); err == nil && m.TransactionID == req.TransactionID {
							ms = append(ms, m)
						}
					}
				}()
			}
			for range pcs {
				got = append(got, <-replies...)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("renewing %s with %s: %v", ciaddr, server, err)
		}
		return got
	}

	// With its home's server: one ACK, from this server.
	got := renew("10.98.1.50", "10.98.1.1", 2*time.Second)
	if len(got) != 1 || got[0].MessageType() != dhcpv4.MessageTypeAck || addrOf(got[0].YourIPAddr) != netip.MustParseAddr("10.98.1.50") ||
		addrOf(got[0].ServerIdentifier()) != netip.MustParseAddr("10.98.0.1") {
		t.Fatalf("a renewal sent to the home's server 10.98.1.1: replies %v, want one ACK of 10.98.1.50 naming 10.98.0.1", got)
	}
	// Of an address that is not the MAC's here: nothing, not even a NAK.
	if got := renew("10.98.1.51", "10.98.1.1", time.Second); len(got) != 0 {
		t.Errorf("a renewal of 10.98.1.51, not the MAC's here, sent to another server: replies %v, want none", got)
	}
	// To this server, to another address of the node's and to its
	// bridge subnet's broadcast: one reply each, the UDP socket's.
	for _, server := range []string{"10.98.0.1", "10.98.5.5", "10.98.0.255"} {
		if got := renew("10.98.1.50", server, time.Second); len(got) != 1 || got[0].MessageType() != dhcpv4.MessageTypeAck {
			t.Errorf("a renewal sent to %s, the node's: replies %v, want one ACK", server, got)
		}
	}
}

// gatewayMAC is every node's bridge MAC (plugin.GatewayMAC): a guest's
// entry for its gateway answers on every node.
const gatewayMAC = "02:76:00:00:00:01"

// gatewayBridge makes the bridge br0 in ns, up, with gatewayMAC and the
// address addr (more `ip addr add` arguments after it).
func gatewayBridge(t *testing.T, ns *netnstest.NS, addr ...string) {
	t.Helper()
	ns.MustRun(t, "ip", "link", "add", "br0", "type", "bridge")
	ns.MustRun(t, "ip", "link", "set", "br0", "address", gatewayMAC)
	ns.MustRun(t, "ip", slices.Concat([]string{"addr", "add"}, addr, []string{"dev", "br0"})...)
	ns.MustRun(t, "ip", "link", "set", "br0", "up")
}

// serveOn runs a server on ns's br0 with cfg, over a lease file holding
// the reservation req, until the test ends. Its sockets are made in ns
// and keep it: the server answers once serveOn returns. (A lease must name
// no bridge port: the workers' threads are not in ns, and would look the
// port up in the host's namespace; vmlaned runs in the host's.)
func serveOn(t *testing.T, ns *netnstest.NS, cfg Config, req leases.ReserveRequest) {
	t.Helper()
	st, err := leases.Open(filepath.Join(t.TempDir(), "leases.json"), cfg.Subnet, cfg.ServerIP)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Reserve(req); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	h, err := NewHandler(cfg, NewStoreAllocator(st), WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	var s *Server
	if err := ns.Do(func() (err error) { s, err = Listen("br0", h); return err }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, log) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
}

// TestElsewhereRequest: of what the packet socket reads, only what may be
// a renewal is handed on: a REQUEST from ciaddr, not through a relay, in
// a frame read on the bridge, from the client's own MAC, sent to the
// bridge.
func TestElsewhereRequest(t *testing.T) {
	const bridge = 7
	mac := net.HardwareAddr{2, 0, 10, 98, 1, 50}
	ci, home := netip.MustParseAddr("10.98.1.50"), netip.MustParseAddr("10.98.1.1")
	packet := func(src, dst netip.Addr, mod ...dhcpv4.Modifier) []byte {
		req, err := dhcpv4.New(append([]dhcpv4.Modifier{dhcpv4.WithHwAddr(mac), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
			dhcpv4.WithClientIP(ci.AsSlice())}, mod...)...)
		if err != nil {
			t.Fatal(err)
		}
		return rawip.UDP4(src, dst, 68, 67, req.ToBytes())
	}
	from := func(ifindex int, pkttype uint8, m net.HardwareAddr) unix.Sockaddr {
		ll := &unix.SockaddrLinklayer{Ifindex: ifindex, Halen: 6, Pkttype: pkttype}
		copy(ll.Addr[:], m)
		return ll
	}
	fragment := packet(ci, home)
	fragment[6] |= 0x20 // more fragments
	reply := packet(ci, home)
	reply[28] = byte(dhcpv4.OpcodeBootReply)
	for _, c := range []struct {
		name string
		from unix.Sockaddr
		b    []byte
		want bool
	}{
		{"a renewal sent to its home's server", from(bridge, unix.PACKET_HOST, mac), packet(ci, home), true},
		{"read on another link", from(bridge+1, unix.PACKET_HOST, mac), packet(ci, home), false},
		{"a frame for another MAC", from(bridge, unix.PACKET_OTHERHOST, mac), packet(ci, home), false},
		{"from another MAC than chaddr", from(bridge, unix.PACKET_HOST, net.HardwareAddr{2, 0, 10, 98, 1, 51}), packet(ci, home), false},
		{"from another address than ciaddr", from(bridge, unix.PACKET_HOST, mac), packet(netip.MustParseAddr("10.98.1.51"), home), false},
		{"through a relay", from(bridge, unix.PACKET_HOST, mac), packet(ci, home, dhcpv4.WithGatewayIP(net.IPv4(10, 98, 1, 1))), false},
		{"a DISCOVER", from(bridge, unix.PACKET_HOST, mac), packet(ci, home, dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover)), false},
		{"a BOOTREPLY", from(bridge, unix.PACKET_HOST, mac), reply, false},
		{"a fragment", from(bridge, unix.PACKET_HOST, mac), fragment, false},
		{"cut short", from(bridge, unix.PACKET_HOST, mac), packet(ci, home)[:100], false},
	} {
		req, src, dst, ok := elsewhereRequest(c.from, bridge, c.b)
		if ok != c.want {
			t.Errorf("%s: handed on %v, want %v", c.name, ok, c.want)
			continue
		}
		if ok && (src != netip.AddrPortFrom(ci, 68) || dst != home || req.ClientHWAddr.String() != mac.String()) {
			t.Errorf("%s: from %v to %v, chaddr %v", c.name, src, dst, req.ClientHWAddr)
		}
	}
}

// TestElsewhereAnswersOnlyWithAnACK: a renewal sent to another server is
// answered only when it renews the MAC's lease here, and never with a
// NAK, even when the bind is refused (the lease changed under it).
func TestElsewhereAnswersOnlyWithAnACK(t *testing.T) {
	mac := net.HardwareAddr{2, 0, 10, 98, 1, 50}
	lease := leases.Lease{MAC: mac.String(), IP: netip.MustParseAddr("10.98.0.50"), State: leases.StateBound, Source: leases.SourceCNI}
	renewal := func(ci string, mod ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
		req, err := dhcpv4.New(append([]dhcpv4.Modifier{dhcpv4.WithHwAddr(mac), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
			dhcpv4.WithClientIP(net.ParseIP(ci))}, mod...)...)
		if err != nil {
			t.Fatal(err)
		}
		return req
	}
	for _, c := range []struct {
		name   string
		req    *dhcpv4.DHCPv4
		refuse bool // the bind fails
		want   string
	}{
		{"a renewal of the MAC's address", renewal("10.98.0.50"), false, "ACK"},
		{"of another address", renewal("10.98.0.51"), false, "nothing"},
		{"naming a server", renewal("10.98.0.50", dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 98, 0, 1)))), false, "nothing"},
		{"asking for an address", renewal("10.98.0.50", dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 98, 0, 51)))), false, "nothing"},
		{"a bind refused", renewal("10.98.0.50"), true, "nothing"},
	} {
		var a Allocator = newFake(lease)
		if c.refuse {
			a = refusingAlloc{newFake(lease)}
		}
		h, _ := newTestHandler(t, testConfig(), a)
		conn := &recordingConn{}
		serveOne(conn, nil, h, slog.New(slog.DiscardHandler), &macMutex{}, packet{req: c.req, from: &net.UDPAddr{IP: c.req.ClientIPAddr, Port: 68}, elsewhere: true})
		got := "nothing"
		if len(conn.sent) == 1 {
			got = conn.sent[0].MessageType().String()
		} else if len(conn.sent) > 1 {
			got = fmt.Sprintf("%d replies", len(conn.sent))
		}
		if got != c.want {
			t.Errorf("%s: answered %s, want %s", c.name, got, c.want)
		}
	}
}

// refusingAlloc refuses every bind, as a lease file whose lease changed.
type refusingAlloc struct{ *fakeAlloc }

func (refusingAlloc) Bind(net.HardwareAddr, netip.Addr, time.Time, string) (leases.Lease, error) {
	return leases.Lease{}, leases.ErrConflict
}

// recordingConn is a net.PacketConn that keeps the DHCP messages written
// to it.
type recordingConn struct {
	net.PacketConn
	sent []*dhcpv4.DHCPv4
}

func (c *recordingConn) WriteTo(b []byte, _ net.Addr) (int, error) {
	m, err := dhcpv4.FromBytes(b)
	if err != nil {
		return 0, err
	}
	c.sent = append(c.sent, m)
	return len(b), nil
}

// TestElsewhereFilter runs the socket's filter on packets: it passes UDP
// from port 68 to port 67 of another address, and nothing to the server's
// address, to broadcast or multicast addresses, fragments, other ports or
// other protocols.
func TestElsewhereFilter(t *testing.T) {
	server := netip.MustParseAddr("10.98.0.1")
	prog, err := elsewhereFilter(server)
	if err != nil {
		t.Fatal(err)
	}
	insns := make([]bpf.Instruction, len(prog))
	for i, r := range prog {
		insns[i] = r.Disassemble()
	}
	vm, err := bpf.NewVM(insns)
	if err != nil {
		t.Fatal(err)
	}
	ci, home := netip.MustParseAddr("10.98.1.50"), netip.MustParseAddr("10.98.1.1")
	withOptions := rawip.UDP4(ci, home, 68, 67, make([]byte, 300))
	withOptions = slices.Concat([]byte{0x46}, withOptions[1:20], []byte{1, 1, 1, 0}, withOptions[20:]) // a 24-byte header
	fragment := rawip.UDP4(ci, home, 68, 67, make([]byte, 300))
	fragment[7] = 1 // fragment offset 8
	first := rawip.UDP4(ci, home, 68, 67, make([]byte, 300))
	first[6] = 0x20 // more fragments, offset 0
	for _, c := range []struct {
		name string
		b    []byte
		want bool
	}{
		{"to another server", rawip.UDP4(ci, home, 68, 67, make([]byte, 300)), true},
		{"to another server, with IP options", withOptions, true},
		{"to the server", rawip.UDP4(ci, server, 68, 67, make([]byte, 300)), false},
		{"broadcast", rawip.UDP4(ci, netip.MustParseAddr("255.255.255.255"), 68, 67, make([]byte, 300)), false},
		{"from another port", rawip.UDP4(ci, home, 67, 67, make([]byte, 300)), false},
		{"to another port", rawip.UDP4(ci, home, 68, 68, make([]byte, 300)), false},
		{"a fragment", fragment, false},
		{"a first fragment", first, false},
		{"multicast", rawip.UDP4(ci, netip.MustParseAddr("224.0.0.1"), 68, 67, make([]byte, 300)), false},
		{"TCP from port 68 to port 67", rawip.IPv4(ci, home, 6, append([]byte{0, 68, 0, 67}, make([]byte, 36)...)), false},
	} {
		n, err := vm.Run(c.b)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := n > 0; got != c.want {
			t.Errorf("%s: passed %v, want %v", c.name, got, c.want)
		}
	}
}

// TestUdhcpcRenewsWhereItMoved: busybox udhcpc binds with its home
// node's server; its port then moves to another node's bridge (a live
// migration, as far as the client can tell); its renewal, sent to its
// home's server, is answered there, and it renews with that node's
// server from then on.
func TestUdhcpcRenewsWhereItMoved(t *testing.T) {
	privtest.Require(t, "ip", "busybox")
	home := netnstest.New(t, "dmhome")
	there := netnstest.New(t, "dmthere")
	cli := netnstest.New(t, "dmcli")
	const mac = "02:00:0a:62:01:33"
	gatewayBridge(t, home, "10.98.1.1/24")
	gatewayBridge(t, there, "10.98.0.1/24")
	home.MustRun(t, "ip", "link", "add", "vh0", "type", "veth", "peer", "name", "eth0", "netns", cli.Name)
	home.MustRun(t, "ip", "link", "set", "vh0", "master", "br0", "up")
	cli.MustRun(t, "ip", "link", "set", "eth0", "address", mac, "up")
	there.MustRun(t, "ip", "route", "add", "10.98.1.50/32", "dev", "br0")

	homeCfg := testConfig()
	homeCfg.ServerIP, homeCfg.Router, homeCfg.Subnet = netip.MustParseAddr("10.98.1.1"), netip.MustParseAddr("10.98.1.1"), netip.MustParsePrefix("10.98.1.0/24")
	vm := leases.ReserveRequest{Key: leases.Key{ContainerID: "c1", IfName: "eth0"}, MAC: mac, IP: netip.MustParseAddr("10.98.1.50"), Pod: leases.Pod{Namespace: "default", Name: "vm-a"}}
	serveOn(t, home, homeCfg, vm)
	vm.Key.ContainerID, vm.VMName, vm.Home = "c2", "default/vm-a", netip.MustParsePrefix("10.98.1.0/24")
	serveOn(t, there, testConfig(), vm)

	script := filepath.Join(t.TempDir(), "script.sh")
	if err := os.WriteFile(script, []byte(udhcpcScript), 0o755); err != nil {
		t.Fatal(err)
	}
	env := func(event string) map[string]string { return udhcpcEnv(script, event) }
	cmd := cli.Command("busybox", "udhcpc", "-i", "eth0", "-f", "-t", "5", "-T", "1", "-s", script)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop := sync.OnceFunc(func() { cmd.Process.Kill(); cmd.Wait() })
	defer stop()
	deadline := time.Now().Add(10 * time.Second)
	for env("bound") == nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if e := env("bound"); e["ip"] != "10.98.1.50" || e["serverid"] != "10.98.1.1" {
		t.Fatalf("udhcpc at home: bound ip %q serverid %q, want 10.98.1.50 from 10.98.1.1", e["ip"], e["serverid"])
	}

	// The port moves to the other node's bridge; the client's entry for
	// its server's address names the MAC every node's bridge has.
	home.MustRun(t, "ip", "link", "set", "vh0", "netns", there.Name)
	there.MustRun(t, "ip", "link", "set", "vh0", "master", "br0", "up")
	cli.MustRun(t, "ip", "neigh", "replace", "10.98.1.1", "lladdr", gatewayMAC, "dev", "eth0")
	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil { // renew now
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for env("renew") == nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	// Answered by unicast: without the answer here, udhcpc broadcast the
	// request next (REBINDING, at T2 when it is not told to renew now),
	// which this server answered as well.
	if e := env("renew"); e["ip"] != "10.98.1.50" || e["serverid"] != "10.98.0.1" || strings.Contains(out.String(), "broadcasting renew") {
		t.Fatalf("udhcpc after its port moved: renewed ip %q serverid %q, want 10.98.1.50 from 10.98.0.1 (the server where it runs now) by unicast; it said:\n%s", e["ip"], e["serverid"], out.String())
	}
}

package dhcp

import (
	"context"
	"errors"
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
// give), and a request to one of the node's own addresses is answered
// once, by the UDP socket.
func TestRenewalForAnotherServer(t *testing.T) {
	privtest.Require(t, "ip")
	srv := netnstest.New(t, "desrv")
	cli := netnstest.New(t, "decli")
	const mac = "02:00:0a:62:01:32"
	srv.MustRun(t, "ip", "link", "add", "br0", "type", "bridge")
	srv.MustRun(t, "ip", "link", "set", "br0", "address", "02:76:00:00:00:01")
	srv.MustRun(t, "ip", "addr", "add", "10.98.0.1/24", "dev", "br0")
	srv.MustRun(t, "ip", "addr", "add", "10.98.5.5/32", "dev", "lo")
	srv.MustRun(t, "ip", "link", "set", "br0", "up")
	srv.MustRun(t, "ip", "link", "add", "vh0", "type", "veth", "peer", "name", "eth0", "netns", cli.Name)
	srv.MustRun(t, "ip", "link", "set", "vh0", "master", "br0", "up")
	// The VM's host route onto the bridge, as vmlaned's for a VM that
	// moved in.
	srv.MustRun(t, "ip", "route", "add", "10.98.1.50/32", "dev", "br0")
	cli.MustRun(t, "ip", "link", "set", "eth0", "address", mac, "up")
	cli.MustRun(t, "ip", "addr", "add", "10.98.1.50/24", "dev", "eth0")
	cli.MustRun(t, "ip", "addr", "add", "10.98.1.51/24", "dev", "eth0")
	// Its home gateway, by the MAC every node's bridge has.
	cli.MustRun(t, "ip", "neigh", "add", "10.98.1.1", "lladdr", "02:76:00:00:00:01", "dev", "eth0")
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
	// To this server, and to another address of the node's: one reply
	// each, the UDP socket's.
	for _, server := range []string{"10.98.0.1", "10.98.5.5"} {
		if got := renew("10.98.1.50", server, time.Second); len(got) != 1 || got[0].MessageType() != dhcpv4.MessageTypeAck {
			t.Errorf("a renewal sent to %s, the node's: replies %v, want one ACK", server, got)
		}
	}
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

// TestElsewhereRequest: of what the packet socket reads, only a renewal
// is handed on: a REQUEST from ciaddr, to an address not the node's, in a
// frame from the client's own MAC sent to the bridge.
func TestElsewhereRequest(t *testing.T) {
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
	from := func(pkttype uint8, m net.HardwareAddr) unix.Sockaddr {
		ll := &unix.SockaddrLinklayer{Halen: 6, Pkttype: pkttype}
		copy(ll.Addr[:], m)
		return ll
	}
	notLocal := func(netip.Addr) bool { return false }
	fragment := packet(ci, home)
	fragment[6] |= 0x20 // more fragments
	for _, c := range []struct {
		name  string
		from  unix.Sockaddr
		b     []byte
		local func(netip.Addr) bool
		want  bool
	}{
		{"a renewal sent to its home's server", from(unix.PACKET_HOST, mac), packet(ci, home), notLocal, true},
		{"to an address of the node's", from(unix.PACKET_HOST, mac), packet(ci, home), func(netip.Addr) bool { return true }, false},
		{"a frame for another MAC", from(unix.PACKET_OTHERHOST, mac), packet(ci, home), notLocal, false},
		{"from another MAC than chaddr", from(unix.PACKET_HOST, net.HardwareAddr{2, 0, 10, 98, 1, 51}), packet(ci, home), notLocal, false},
		{"from another address than ciaddr", from(unix.PACKET_HOST, mac), packet(netip.MustParseAddr("10.98.1.51"), home), notLocal, false},
		{"a DISCOVER", from(unix.PACKET_HOST, mac), packet(ci, home, dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover)), notLocal, false},
		{"a fragment", from(unix.PACKET_HOST, mac), fragment, notLocal, false},
		{"cut short", from(unix.PACKET_HOST, mac), packet(ci, home)[:100], notLocal, false},
	} {
		req, src, ok := elsewhereRequest(c.from, c.b, c.local)
		if ok != c.want {
			t.Errorf("%s: handed on %v, want %v", c.name, ok, c.want)
			continue
		}
		if ok && (src.String() != "10.98.1.50:68" || req.ClientHWAddr.String() != mac.String()) {
			t.Errorf("%s: from %v, chaddr %v", c.name, src, req.ClientHWAddr)
		}
	}
}

// TestElsewhereFilter runs the socket's filter on packets: it passes UDP
// from port 68 to port 67 of another address, and nothing to the server's
// address, to the broadcast address, fragments, or other ports.
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
		{"TCP", rawip.IPv4(ci, home, 6, make([]byte, 40)), false},
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
	for _, n := range []struct {
		ns   *netnstest.NS
		addr string
	}{{home, "10.98.1.1/24"}, {there, "10.98.0.1/24"}} {
		n.ns.MustRun(t, "ip", "link", "add", "br0", "type", "bridge")
		n.ns.MustRun(t, "ip", "link", "set", "br0", "address", "02:76:00:00:00:01")
		n.ns.MustRun(t, "ip", "addr", "add", n.addr, "dev", "br0")
		n.ns.MustRun(t, "ip", "link", "set", "br0", "up")
	}
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
	env := func(event string) map[string]string {
		data, err := os.ReadFile(script + ".env." + event)
		if err != nil {
			return nil
		}
		out := map[string]string{}
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				out[k] = v
			}
		}
		return out
	}
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
	cli.MustRun(t, "ip", "neigh", "replace", "10.98.1.1", "lladdr", "02:76:00:00:00:01", "dev", "eth0")
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

package dhcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"golang.org/x/net/bpf"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// Server6 is a DHCPv6 server on one interface (the node bridge).
//
// It reads requests from a packet socket, for the one thing a UDP socket
// does not give: the Ethernet source address, which is the client's
// identity (see [Handler6]). A BPF filter lets in only IPv6 UDP to port
// 547. Replies leave by a UDP socket bound to [::]:547 on the interface,
// to the client's link-local address and port 546; that socket also joins
// ff02::1:2 (All_DHCP_Relay_Agents_and_Servers), so the bridge delivers
// the clients' multicast to the node.
type Server6 struct {
	iface string
	fd    int
	conn  *net.UDPConn
	h     *Handler6
}

// Listen6 opens the server's sockets on iface. The caller must call Serve
// or Close. The sockets belong to the calling thread's network namespace.
func Listen6(iface string, h *Handler6) (*Server6, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, fmt.Errorf("DHCPv6 on %s: %w", iface, err)
	}
	fd, err := openPacket6(ifi.Index)
	if err != nil {
		return nil, fmt.Errorf("opening DHCPv6 packet socket on %s: %w", iface, err)
	}
	conn, err := listenReply6(ifi)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("opening DHCPv6 socket on %s: %w", iface, err)
	}
	return &Server6{iface: iface, fd: fd, conn: conn, h: h}, nil
}

// dhcp6Filter passes IPv6 packets whose next header is UDP and whose
// destination port is 547, the server port; a packet socket of type
// SOCK_DGRAM hands the filter the IPv6 header at offset 0. (DHCPv6
// messages carry no extension headers.)
var dhcp6Filter = func() []bpf.RawInstruction {
	prog, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 6, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.IPPROTO_UDP, SkipTrue: 3},
		bpf.LoadAbsolute{Off: 40 + 2, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: dhcpv6.DefaultServerPort, SkipTrue: 1},
		bpf.RetConstant{Val: 0xffff},
		bpf.RetConstant{Val: 0},
	})
	if err != nil {
		panic(err)
	}
	return prog
}()

func openPacket6(ifindex int) (int, error) {
	return openPacket(ifindex, unix.ETH_P_IPV6, dhcp6Filter)
}

// openPacket opens a SOCK_DGRAM packet socket of the ethertype proto on
// the interface ifindex, which reads what the filter prog passes (it sees
// the network header at offset 0).
func openPacket(ifindex int, proto uint16, prog []bpf.RawInstruction) (int, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(proto)))
	if err != nil {
		return -1, err
	}
	filter := make([]unix.SockFilter, len(prog))
	for i, r := range prog {
		filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fprog); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("attaching filter: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(proto), Ifindex: ifindex}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func listenReply6(ifi *net.Interface) (*net.UDPConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if serr = unix.SetsockoptString(int(fd), unix.SOL_SOCKET, unix.SO_BINDTODEVICE, ifi.Name); serr != nil {
				return
			}
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
		})
		return errors.Join(err, serr)
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp6", fmt.Sprintf("[::]:%d", dhcpv6.DefaultServerPort))
	if err != nil {
		return nil, err
	}
	conn := pc.(*net.UDPConn)
	// The requests come in by the packet socket; this one only keeps the
	// group joined, so its queue is kept small.
	_ = conn.SetReadBuffer(1)
	if err := ipv6.NewPacketConn(conn).JoinGroup(ifi, &net.UDPAddr{IP: dhcpv6.AllDHCPRelayAgentsAndServers}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("joining %s: %w", dhcpv6.AllDHCPRelayAgentsAndServers, err)
	}
	return conn, nil
}

// Close closes the sockets of a server that will not Serve.
func (s *Server6) Close() error {
	return errors.Join(unix.Close(s.fd), s.conn.Close())
}

// packet6 is one request as the read loop hands it to a worker.
type packet6 struct {
	req  *dhcpv6.Message
	mac  net.HardwareAddr
	from netip.AddrPort
	// unicast: sent to an address of the server's, not ff02::1:2.
	unicast bool
}

// Serve answers DHCPv6 until ctx is done, then closes the sockets. It
// returns nil when ctx ends, or the error that stopped it.
func (s *Server6) Serve(ctx context.Context, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "dhcpv6", "interface", s.iface)
	// The sockets close when the loop ends. A read wakes every 500 ms to
	// see ctx: closing a descriptor another thread reads does not
	// interrupt the read (and its number could be reused under it).
	defer s.Close()
	tv := unix.NsecToTimeval((500 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(s.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("DHCPv6 socket timeout: %w", err)
	}

	queue := make(chan packet6, 256)
	var wg sync.WaitGroup
	var macs macMutex
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range queue {
				s.serveOne(log, &macs, p)
			}
		}()
	}
	defer func() {
		close(queue)
		wg.Wait()
	}()

	limit := newRateLimiter(RateLimit, RateBurst)
	log.Info("serving DHCPv6")
	buf := make([]byte, 65536)
	for {
		n, from, err := unix.Recvfrom(s.fd, buf, 0)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading DHCPv6 socket: %w", err)
		}
		ll, ok := from.(*unix.SockaddrLinklayer)
		if !ok || ll.Halen != 6 || ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		src, dst, payload, ok := parseUDP6(buf[:n])
		if !ok {
			s.h.drop(DropMalformed)
			continue
		}
		mac := net.HardwareAddr(append([]byte(nil), ll.Addr[:6]...))
		req, err := dhcpv6.MessageFromBytes(payload)
		if err != nil {
			s.h.drop(DropMalformed)
			log.Debug("dropping unparsable packet", "from", src, "mac", mac.String(), "err", err)
			continue
		}
		if ok, why := limit.allow(mac, time.Now()); !ok {
			s.h.drop(why)
			continue
		}
		select {
		case queue <- packet6{req, mac, src, !dst.IsMulticast()}:
		default:
			s.h.drop(DropQueueFull)
		}
	}
}

func (s *Server6) serveOne(log *slog.Logger, macs *macMutex, p packet6) {
	unlock := macs.lock(p.mac)
	defer unlock()
	reply, undo, err := s.h.HandleFrom(p.req, p.mac, p.unicast)
	if err != nil || reply == nil {
		return
	}
	// Replies go to the address and port the request came from (RFC
	// 8415 §18.3: the client's link-local address, port 546).
	to := &net.UDPAddr{IP: p.from.Addr().AsSlice(), Port: int(p.from.Port()), Zone: s.iface}
	if _, err := s.conn.WriteToUDP(reply.ToBytes(), to); err != nil {
		log.Warn("sending DHCPv6 reply", "to", to.String(), "type", reply.MessageType, "err", err)
		// A Rapid Commit binding the client never heard of is undone
		// (under the MAC's lock, before its next message is handled).
		if undo != nil {
			if err := undo(); err != nil {
				log.Error("undoing the binding of an unsent rapid commit reply", "mac", p.mac.String(), "err", err)
			}
		}
	}
}

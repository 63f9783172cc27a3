package dhcp

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/vishvananda/netlink"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// A guest renews its lease (RENEWING, RFC 2131 §4.4.5) by unicast to the
// server that gave it, the server identifier it holds. A VM that moved or
// live-migrated to this node holds its home node's, an address that is
// not this node's: the kernel forwards the renewal to the home node,
// whose server, bound to its own bridge, never sees it, and the guest kept
// its address only by rebinding, broadcast, at T2. So the server also
// reads, on a packet socket of the bridge, the unicast requests from port
// 68 to port 67 of any other address sent to the bridge's MAC, and
// answers those that renew a lease of this node's (the MAC's address is
// ciaddr, the frame comes from that MAC) with an ACK, which names this
// server: the guest renews with it from then on. Anything else it leaves
// alone, with no NAK: that is the other server's to give.

// elsewhereFilter passes whole IPv4 UDP packets from port 68 to port 67
// that are not for server's address, nor multicast or broadcast
// (224.0.0.0/3); the socket is SOCK_DGRAM, so offset 0 is the IPv4
// header.
func elsewhereFilter(server netip.Addr) ([]bpf.RawInstruction, error) {
	return bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 9, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.IPPROTO_UDP, SkipTrue: 10},
		bpf.LoadAbsolute{Off: 6, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: 0x3fff, SkipTrue: 8}, // a fragment
		bpf.LoadAbsolute{Off: 16, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: binaryAddr(server), SkipTrue: 6},
		bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: 0xe0000000, SkipTrue: 5},
		bpf.LoadMemShift{Off: 0},
		bpf.LoadIndirect{Off: 0, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: dhcpv4.ClientPort, SkipTrue: 2},
		bpf.LoadIndirect{Off: 2, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: dhcpv4.ServerPort, SkipTrue: 1},
		bpf.RetConstant{Val: 0},
		bpf.RetConstant{Val: 0xffff},
	})
}

func binaryAddr(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// elsewhereRequest is what a frame read on the packet socket holds, if it
// may be a renewal sent to another server: read on the bridge (ifindex),
// sent to it (PACKET_HOST), from the client's own MAC, a REQUEST whose
// ciaddr is the packet's source, not through a relay; dst is where it was
// sent, whose being the node's own the caller checks last (a route
// look-up).
func elsewhereRequest(from unix.Sockaddr, ifindex int, b []byte) (req *dhcpv4.DHCPv4, src netip.AddrPort, dst netip.Addr, ok bool) {
	ll, ok := from.(*unix.SockaddrLinklayer)
	if !ok || ll.Ifindex != ifindex || ll.Halen != 6 || ll.Pkttype != unix.PACKET_HOST {
		return nil, src, dst, false
	}
	src, dst, payload, ok := parseUDP4(b)
	if !ok {
		return nil, src, dst, false
	}
	req, err := dhcpv4.FromBytes(payload)
	if err != nil || req.OpCode != dhcpv4.OpcodeBootRequest || req.MessageType() != dhcpv4.MessageTypeRequest ||
		addrOf(req.ClientIPAddr) != src.Addr() || addrOf(req.GatewayIPAddr).IsValid() ||
		len(req.ClientHWAddr) != 6 || string(req.ClientHWAddr) != string(ll.Addr[:6]) {
		return nil, src, dst, false
	}
	return req, src, dst, true
}

// elsewhereSocket is the packet socket of renewals for other servers, and
// a netlink handle in the namespace it was opened in, which tells the
// node's own addresses (a reader goroutine's thread may be in another).
type elsewhereSocket struct {
	fd      int
	ifindex int
	nl      *netlink.Handle
}

// listenElsewhere opens the socket on iface for a server at server.
func listenElsewhere(iface string, server netip.Addr) (*elsewhereSocket, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, err
	}
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	prog, err := elsewhereFilter(server)
	if err != nil {
		nl.Close()
		return nil, err
	}
	fd, err := openPacket(ifi.Index, unix.ETH_P_IP, prog)
	if err != nil {
		nl.Close()
		return nil, err
	}
	// A read wakes every 500 ms to see whether the server stopped:
	// closing a descriptor another thread reads does not interrupt it.
	tv := unix.NsecToTimeval((500 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		nl.Close()
		return nil, err
	}
	return &elsewhereSocket{fd: fd, ifindex: ifi.Index, nl: nl}, nil
}

// Close closes the socket; a nil one is closed already.
func (e *elsewhereSocket) Close() error {
	if e == nil || e.fd < 0 {
		return nil
	}
	err := unix.Close(e.fd)
	e.fd = -1
	e.nl.Close()
	return err
}

// forwarded reports whether the kernel forwards (or drops, having no
// route) a packet to a from src on the bridge rather than delivering it
// to the node: its own addresses, and their subnets' broadcasts, are the
// UDP socket's. A look-up that fails otherwise says no: a reply twice is
// worse than none, which the client's rebinding makes up for.
func (e *elsewhereSocket) forwarded(src, a netip.Addr) bool {
	rs, err := e.nl.RouteGetWithOptions(a.AsSlice(), &netlink.RouteGetOptions{IifIndex: e.ifindex, SrcAddr: src.AsSlice()})
	if errors.Is(err, unix.ENETUNREACH) || errors.Is(err, unix.EHOSTUNREACH) {
		return true
	}
	return err == nil && len(rs) > 0 && rs[0].Type == unix.RTN_UNICAST
}

// read hands the renewals for other servers to queue until ctx ends,
// through limit, the server's rate limiter.
func (e *elsewhereSocket) read(ctx context.Context, queue chan<- packet, limit *rateLimiter, h *Handler, log *slog.Logger) {
	buf := make([]byte, 65536)
	for ctx.Err() == nil {
		n, from, err := unix.Recvfrom(e.fd, buf, 0)
		if err != nil {
			if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) && ctx.Err() == nil {
				log.Warn("reading the socket of renewals for other servers", "err", err)
				time.Sleep(500 * time.Millisecond)
			}
			continue
		}
		req, src, dst, ok := elsewhereRequest(from, e.ifindex, buf[:n])
		if !ok {
			continue
		}
		if ok, why := limit.allow(req.ClientHWAddr, time.Now()); !ok {
			h.hooks.drop(why)
			continue
		}
		if !e.forwarded(src.Addr(), dst) {
			continue
		}
		select {
		case queue <- packet{req: req, from: net.UDPAddrFromAddrPort(src), elsewhere: true}:
		default:
			h.hooks.drop(DropQueueFull)
		}
	}
}

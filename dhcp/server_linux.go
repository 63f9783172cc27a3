package dhcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
)

// workers is how many packets are handled at once. Handling waits on the
// lease file's fsync; a few in flight keep a burst of booting VMs from
// queueing behind one disk write each.
const workers = 8

// Serve answers DHCP on iface until ctx is done. The socket is bound to
// 0.0.0.0:67 and to the interface with SO_BINDTODEVICE, so requests
// arriving on other interfaces never reach it and broadcast replies leave
// through iface only. It returns nil when ctx ends, or the error that
// stopped it.
//
// The socket belongs to the network namespace of the thread that calls
// Serve; tests lock a goroutine into a namespace before calling it.
func Serve(ctx context.Context, iface string, h *Handler, log *slog.Logger) error {
	s, err := Listen(iface, h)
	if err != nil {
		return err
	}
	return s.Serve(ctx, log)
}

// Server is a DHCP server whose sockets are open: Listen binds them, so a
// caller knows the server is up (or why it is not) before it reports
// itself ready, and Serve answers on them.
type Server struct {
	iface string
	conn  net.PacketConn
	ports *portSender
	h     *Handler
	// elsewhere reads the renewals sent to other servers
	// (elsewhere_linux.go).
	elsewhere *elsewhereSocket
}

// Listen opens the server's sockets on iface, as Serve describes. The
// caller must call Serve or Close.
func Listen(iface string, h *Handler) (*Server, error) {
	conn, err := server4.NewIPv4UDPConn(iface, &net.UDPAddr{Port: dhcpv4.ServerPort})
	if err != nil {
		return nil, fmt.Errorf("opening DHCP socket on %s: %w", iface, err)
	}
	ports, err := newPortSender(iface, h.cfg.ServerIP)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("opening DHCP reply socket on %s: %w", iface, err)
	}
	elsewhere, err := listenElsewhere(iface, h.cfg.ServerIP)
	if err != nil {
		conn.Close()
		ports.Close()
		return nil, fmt.Errorf("opening the DHCP socket of renewals for other servers on %s: %w", iface, err)
	}
	return &Server{iface: iface, conn: conn, ports: ports, h: h, elsewhere: elsewhere}, nil
}

// Serve answers DHCP until ctx is done, then closes the sockets. It
// returns nil when ctx ends, or the error that stopped it.
func (s *Server) Serve(ctx context.Context, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	defer s.ports.Close()
	defer s.elsewhere.Close()
	return serveConn(ctx, s.conn, s.ports, s.elsewhere, s.h, log.With("component", "dhcp", "interface", s.iface))
}

// Close closes the sockets of a server that will not Serve.
func (s *Server) Close() error {
	return errors.Join(s.conn.Close(), s.ports.Close(), s.elsewhere.Close())
}

type packet struct {
	req  *dhcpv4.DHCPv4
	from net.Addr
	// elsewhere: a renewal sent to another server's address, answered
	// only with an ACK.
	elsewhere bool
}

// serveConn serves requests read from conn, and the renewals for other
// servers read from elsewhere (nil: none). Replies go out of the client's
// own bridge port through ports when its lease names one (nil ports:
// always conn).
func serveConn(ctx context.Context, conn net.PacketConn, ports *portSender, elsewhere *elsewhereSocket, h *Handler, log *slog.Logger) error {
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	queue := make(chan packet, 256)
	var wg sync.WaitGroup
	var macs macMutex
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range queue {
				serveOne(conn, ports, h, log, &macs, p)
			}
		}()
	}
	rctx, stopReaders := context.WithCancel(ctx)
	var readers sync.WaitGroup
	defer func() {
		stopReaders()
		readers.Wait()
		close(queue)
		wg.Wait()
	}()
	limit := newRateLimiter(RateLimit, RateBurst)
	if elsewhere != nil {
		readers.Add(1)
		go func() {
			defer readers.Done()
			elsewhere.read(rctx, queue, limit, h, log)
		}()
	}

	log.Info("serving DHCP")
	buf := make([]byte, 65536)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			log.Warn("reading DHCP socket", "err", err)
			continue
		}
		req, err := dhcpv4.FromBytes(buf[:n])
		if err != nil {
			h.hooks.drop(DropMalformed)
			log.Debug("dropping unparsable packet", "from", from, "len", n, "err", err)
			continue
		}
		if ok, why := limit.allow(req.ClientHWAddr, time.Now()); !ok {
			h.hooks.drop(why)
			log.Debug("dropping packet over a rate limit", "mac", req.ClientHWAddr.String(), "limit", why)
			continue
		}
		select {
		case queue <- packet{req: req, from: from}:
		default:
			h.hooks.drop(DropQueueFull)
			log.Debug("dropping packet: handler queue full", "mac", req.ClientHWAddr.String())
		}
	}
}

func serveOne(conn net.PacketConn, ports *portSender, h *Handler, log *slog.Logger, macs *macMutex, p packet) {
	unlock := macs.lock(p.req.ClientHWAddr)
	defer unlock()
	if p.elsewhere && !h.renewsHere(p.req) {
		h.hooks.drop(DropOtherServer)
		log.Debug("a renewal for another server, of no lease here: left to it", "mac", p.req.ClientHWAddr.String(), "ciaddr", p.req.ClientIPAddr)
		return
	}
	reply, err := h.Handle(p.req)
	if err != nil || reply == nil {
		return // Handle logged and counted it
	}
	if p.elsewhere && reply.MessageType() != dhcpv4.MessageTypeAck {
		// A NAK (the lease changed, a bind refused) is the other
		// server's to give: the client would drop its address.
		log.Debug("a renewal for another server not ACKed here: no reply", "mac", p.req.ClientHWAddr.String(), "reply", reply.MessageType())
		return
	}
	if ports != nil {
		if port := h.portOf(p.req.ClientHWAddr); port != "" {
			if mac, dst, ok := portRoute(p.req, reply); ok {
				// No broadcast fallback: it would show the reply to
				// every neighbour, and a port that cannot be sent on
				// is gone, with its client.
				if err := ports.send(port, mac, dst, reply.ToBytes()); err != nil {
					log.Warn("sending DHCP reply out of the client's port; reply dropped", "port", port, "mac", reply.ClientHWAddr.String(), "err", err)
				}
				return
			}
		}
	}
	to := replyAddr(p.req, reply)
	if _, err := conn.WriteTo(reply.ToBytes(), to); err != nil {
		log.Warn("sending DHCP reply", "type", reply.MessageType(), "to", to, "mac", reply.ClientHWAddr.String(), "err", err)
	}
}

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"golang.org/x/sys/unix"
)

// loadGen is many DHCP clients on one link: a single AF_PACKET socket that
// writes whole Ethernet frames, each client's with its own source MAC, and
// reads every frame to UDP port 68, handing each reply to the exchange
// waiting on its xid. Clients in INIT state have no address, so a UDP
// socket could not tell their replies apart by destination; a packet
// socket sees them whatever they are sent to (vmlaned broadcasts; dnsmasq
// unicasts to chaddr, having set the ARP entry itself).
type loadGen struct {
	f  *os.File
	rc syscall.RawConn
	to unix.SockaddrLinklayer
	mu sync.Mutex
	// family is 4 (DHCP) or 6 (DHCPv6): what the clients speak.
	family  int
	pending map[xid]chan []byte
	stray   atomic.Int64 // replies to no pending xid
	done    chan struct{}

	// busy makes the clients behave like guests on a busy node (see
	// contention); nsPath and ifname are where a client's own socket
	// goes; vcpus are the clients' CPUs, one per client in flight, when
	// they burn any.
	busy           contention
	nsPath, ifname string
	vcpus          []*vcpu
}

// contention is how much like real guests on a busy node the clients
// behave, beyond one quiet shared socket.
type contention struct {
	// ownSocket: each exchange opens (and closes) a packet socket of its
	// own, as each guest's DHCP client has one; every socket on the link
	// then gets a copy of every reply.
	ownSocket bool
	// burn is CPU a client spends after each exchange, as a guest's
	// stack configuring its address does, on a CPU of its own (vcpu), so
	// the server competes with its clients for the cores.
	burn time.Duration
}

func (c contention) String() string {
	switch {
	case c.ownSocket && c.burn > 0:
		return fmt.Sprintf("busy guests (a packet socket of its own per exchange, then %v of CPU burnt)", c.burn)
	case c.ownSocket:
		return "a packet socket of its own per exchange"
	case c.burn > 0:
		return fmt.Sprintf("%v of CPU burnt after each exchange", c.burn)
	}
	return "one shared packet socket, idle between exchanges"
}

// clientProcs is the load generator's GOMAXPROCS when each exchange has
// a socket of its own: a P for every client in flight on top of the
// cores. Closing a packet socket waits in the kernel for an RCU grace
// period (synchronize_net in packet_release), milliseconds in ticks of
// the kernel's clock, and the goroutine's thread keeps its P meanwhile
// until sysmon takes it back, which it does late or not at all while
// another P is idle. With as many Ps as cores, clients closing their
// sockets left no thread polling for replies: replies sat 16 to 35 ms
// (p90 to p99, by kernel timestamps) in their sockets before the client
// read them, and the faster a server answered, the more clients were
// closing at once. That was the load generator's tail, not the server's:
// a guest closes its socket in a kernel of its own.
func clientProcs(clients int) int { return runtime.NumCPU() + clients }

// spin burns d of this thread's CPU.
func spin(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}

// clientPortFilter is `udp dst port 68` as classic BPF (what tcpdump -dd
// prints), so the socket queues only replies: not the frames it sends
// (packet sockets see outgoing frames too), not the bridge's IPv6 chatter.
var clientPortFilter = []unix.SockFilter{
	{Code: 0x28, K: 12},                // ldh [12]          ethertype
	{Code: 0x15, Jf: 8, K: etherIP4},   // jne #0x800, drop
	{Code: 0x30, K: 23},                // ldb [23]          protocol
	{Code: 0x15, Jf: 6, K: protoUDP},   // jne #17, drop
	{Code: 0x28, K: 20},                // ldh [20]          flags+offset
	{Code: 0x45, Jt: 4, K: 0x1fff},     // jset #0x1fff, drop
	{Code: 0xb1, K: 14},                // ldxb 4*([14]&0xf)
	{Code: 0x48, K: 16},                // ldh [x+16]        UDP dst port
	{Code: 0x15, Jf: 1, K: clientPort}, // jne #68, drop
	{Code: 0x06, K: 0x40000},           // ret #262144
	{Code: 0x06, K: 0},                 // drop: ret #0
}

// client6PortFilter is `ip6 and udp dst port 546`: DHCPv6 replies.
var client6PortFilter = []unix.SockFilter{
	{Code: 0x28, K: 12},              // ldh [12]          ethertype
	{Code: 0x15, Jf: 5, K: etherIP6}, // jne #0x86dd, drop
	{Code: 0x30, K: 20},              // ldb [20]          next header
	{Code: 0x15, Jf: 3, K: protoUDP}, // jne #17, drop
	{Code: 0x28, K: 56},              // ldh [56]          UDP dst port
	{Code: 0x15, Jf: 1, K: client6},  // jne #546, drop
	{Code: 0x06, K: 0x40000},         // ret #262144
	{Code: 0x06, K: 0},               // drop: ret #0
}

// xid is an exchange's transaction ID: DHCP's four bytes, or DHCPv6's
// three and a zero.
type xid [4]byte

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// openLoadGen opens the socket of clients of family (4 or 6) on ifname in
// the namespace at nsPath. The socket stays in that namespace whichever
// thread uses it later.
func openLoadGen(nsPath, ifname string, family int) (*loadGen, error) {
	var fd, ifindex int
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		ifindex = ifi.Index
		// Protocol 0: the socket takes no frames until the bind below
		// names the protocol and the link. Opened with ETH_P_IP it
		// would take every IPv4 frame of every link at once, and the
		// bind would have to take that back, which waits for an RCU
		// grace period (synchronize_net): one more wait of milliseconds
		// per exchange with a socket of its own (see clientProcs).
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("opening packet socket on %s: %w", ifname, err)
	}
	filter, proto := clientPortFilter, uint16(unix.ETH_P_IP)
	if family == 6 {
		filter, proto = client6PortFilter, unix.ETH_P_IPV6
	}
	setup := func() error {
		if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
			&unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}); err != nil {
			return fmt.Errorf("attaching filter: %w", err)
		}
		// Room for every reply of a burst: 64 clients in flight never
		// come near it, but a stalled reader must not lose a reply that
		// would then count as a server's timeout.
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20); err != nil {
			return fmt.Errorf("setting receive buffer: %w", err)
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(proto), Ifindex: ifindex})
	}
	if err := setup(); err != nil {
		unix.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "packet:"+ifname)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	g := &loadGen{
		f: f, rc: rc, nsPath: nsPath, ifname: ifname, family: family,
		to:      unix.SockaddrLinklayer{Protocol: htons(proto), Ifindex: ifindex},
		pending: map[xid]chan []byte{},
		done:    make(chan struct{}),
	}
	go g.read()
	return g, nil
}

// close stops the reader and closes the socket.
func (g *loadGen) close() error {
	err := g.f.Close()
	<-g.done
	return err
}

func (g *loadGen) read() {
	defer close(g.done)
	buf := make([]byte, 1<<16)
	for {
		var n int
		var from unix.Sockaddr
		var rerr error
		err := g.rc.Read(func(fd uintptr) bool {
			n, from, rerr = unix.Recvfrom(int(fd), buf, 0)
			return rerr != unix.EAGAIN
		})
		if err != nil {
			return // closed
		}
		if rerr != nil {
			continue
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		id, p, ok := g.reply(buf[:n])
		if !ok {
			continue
		}
		g.mu.Lock()
		ch := g.pending[id]
		g.mu.Unlock()
		if ch == nil {
			g.stray.Add(1)
			continue
		}
		select {
		case ch <- bytes.Clone(p):
		default: // a third reply to one exchange: nobody waits for it
		}
	}
}

// reply takes a server's reply out of a frame: its xid and payload, or
// false for a frame that is none.
func (g *loadGen) reply(frame []byte) (xid, []byte, bool) {
	var id xid
	if g.family == 6 {
		p, ok := serverPayload6(frame)
		// ADVERTISE (2) or REPLY (7), then the three-byte xid.
		if !ok || len(p) < 4 || (p[0] != 2 && p[0] != 7) {
			return id, nil, false
		}
		copy(id[:3], p[1:4])
		return id, p, true
	}
	p, ok := serverPayload(frame)
	if !ok || len(p) < 8 || p[0] != byte(dhcpv4.OpcodeBootReply) {
		return id, nil, false
	}
	copy(id[:], p[4:8])
	return id, p, true
}

// register takes *id for an exchange, or another xid (written to *id,
// whose last byte stays as given) while a pending exchange has it, and
// returns the channel its replies come on.
func (g *loadGen) register(id *xid) (chan []byte, error) {
	ch := make(chan []byte, 2)
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.pending[*id] != nil {
		fresh, err := dhcpv4.GenerateTransactionID()
		if err != nil {
			return nil, err
		}
		copy(id[:3], fresh[:3])
		if g.family == 4 {
			id[3] = fresh[3]
		}
	}
	g.pending[*id] = ch
	return ch, nil
}

func (g *loadGen) unregister(id xid) {
	g.mu.Lock()
	delete(g.pending, id)
	g.mu.Unlock()
}

func (g *loadGen) send(m *dhcpv4.DHCPv4) error {
	if err := g.write(clientFrame(m.ClientHWAddr, m.ToBytes())); err != nil {
		return fmt.Errorf("sending %s for %s: %w", m.MessageType(), m.ClientHWAddr, err)
	}
	return nil
}

// write sends one whole frame.
func (g *loadGen) write(frame []byte) error {
	var serr error
	err := g.rc.Write(func(fd uintptr) bool {
		serr = unix.Sendto(int(fd), frame, 0, &g.to)
		return serr != unix.EAGAIN
	})
	return errors.Join(err, serr)
}

// errTimeout is an OFFER or ACK that did not come in time.
var errTimeout = errors.New("timed out")

// requested asks for every option vmlaned sends, on top of the four
// NewDiscovery asks for, so that dnsmasq (which sends only what a client
// asks for) builds a reply of the same content.
var requested = dhcpv4.WithRequestedOptions(
	dhcpv4.OptionHostName, dhcpv4.OptionInterfaceMTU, dhcpv4.OptionBroadcastAddress,
	dhcpv4.OptionDNSDomainSearchList, dhcpv4.OptionClasslessStaticRoute,
)

// exchange runs one exchange of the clients' family for r: exchange4 or
// exchange6. It returns the time from the first message sent to the last
// reply received, and the last reply's size and option codes, for the log.
func (g *loadGen) exchange(ctx context.Context, r reservation, timeout time.Duration) (time.Duration, string, error) {
	if g.family == 6 {
		return g.exchange6(ctx, r, timeout)
	}
	d, ack, err := g.exchange4(ctx, r, timeout)
	if err != nil {
		return 0, "", err
	}
	return d, fmt.Sprintf("ACK: %d bytes, options %s", len(ack.ToBytes()), optionCodes(ack)), nil
}

// exchange4 runs one DORA for r as a client in INIT state does (broadcast
// flag clear, no retransmission) and returns the time from DISCOVER sent
// to ACK received, and the ACK. Each reply may take up to timeout; one that
// does not come ends the exchange with errTimeout. A NAK or an address
// other than r's is an error: the servers must serve the reservations.
func (g *loadGen) exchange4(ctx context.Context, r reservation, timeout time.Duration) (time.Duration, *dhcpv4.DHCPv4, error) {
	disc, err := dhcpv4.NewDiscovery(r.mac, requested)
	if err != nil {
		return 0, nil, err
	}
	id := xid(disc.TransactionID)
	ch, err := g.register(&id)
	if err != nil {
		return 0, nil, err
	}
	disc.TransactionID = dhcpv4.TransactionID(id)
	defer g.unregister(id)
	start := time.Now()
	if err := g.send(disc); err != nil {
		return 0, nil, err
	}
	offer, err := await(ctx, ch, dhcpv4.MessageTypeOffer, timeout)
	if err != nil {
		return 0, nil, err
	}
	if !offer.YourIPAddr.Equal(r.ip.AsSlice()) {
		return 0, nil, fmt.Errorf("%s was offered %s, not its reservation %s", r.mac, offer.YourIPAddr, r.ip)
	}
	req, err := dhcpv4.NewRequestFromOffer(offer, requested)
	if err != nil {
		return 0, nil, err
	}
	if err := g.send(req); err != nil {
		return 0, nil, err
	}
	ack, err := await(ctx, ch, dhcpv4.MessageTypeAck, timeout)
	if err != nil {
		return 0, nil, err
	}
	lat := time.Since(start)
	if !ack.YourIPAddr.Equal(r.ip.AsSlice()) {
		return 0, nil, fmt.Errorf("%s was ACKed %s, not its reservation %s", r.mac, ack.YourIPAddr, r.ip)
	}
	return lat, ack, nil
}

// await returns the next reply of type want on ch; a NAK is an error,
// any other type (a duplicate OFFER while waiting for the ACK) is skipped.
func await(ctx context.Context, ch <-chan []byte, want dhcpv4.MessageType, timeout time.Duration) (*dhcpv4.DHCPv4, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
			return nil, fmt.Errorf("waiting for %s: %w", want, errTimeout)
		case b := <-ch:
			m, err := dhcpv4.FromBytes(b)
			if err != nil {
				return nil, fmt.Errorf("unparsable reply: %w", err)
			}
			switch m.MessageType() {
			case want:
				return m, nil
			case dhcpv4.MessageTypeNak:
				return nil, fmt.Errorf("NAK for %s (%q) while waiting for %s", m.ClientHWAddr, m.Message(), want)
			}
		}
	}
}

// busyExchange is exchange as g.busy says: on a socket of its own, then
// burning CPU on the client's vcpu.
func (g *loadGen) busyExchange(ctx context.Context, client int, r reservation, timeout time.Duration) (time.Duration, error) {
	on := g
	if g.busy.ownSocket {
		own, err := openLoadGen(g.nsPath, g.ifname, g.family)
		if err != nil {
			return 0, err
		}
		defer own.close()
		on = own
	}
	d, _, err := on.exchange(ctx, r, timeout)
	if err == nil && g.busy.burn > 0 {
		if client >= len(g.vcpus) {
			return 0, fmt.Errorf("client %d has no CPU of its own (%d started)", client, len(g.vcpus))
		}
		err = g.vcpus[client].burn(g.busy.burn)
	}
	return d, err
}

// phase runs one exchange per reservation in rs with clients exchanges in
// flight (each client starts the next as soon as its last ends). It
// returns the latencies of those that completed, the count that timed out,
// and the wall time from the first DISCOVER to the last exchange's end.
// Any other failure stops the phase.
func (g *loadGen) phase(ctx context.Context, rs []reservation, clients int, timeout time.Duration) (lat []time.Duration, timeouts int, wall time.Duration, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lats := make([]time.Duration, len(rs))
	timedOut := make([]bool, len(rs))
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for c := range min(clients, len(rs)) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= len(rs) {
					return
				}
				d, err := g.busyExchange(ctx, c, rs[i], timeout)
				switch {
				case errors.Is(err, errTimeout):
					timedOut[i] = true
				case err != nil:
					cancel(err)
					return
				default:
					lats[i] = d
				}
			}
		})
	}
	wg.Wait()
	wall = time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return nil, 0, 0, err
	}
	for i, d := range lats {
		if timedOut[i] {
			timeouts++
		} else {
			lat = append(lat, d)
		}
	}
	return lat, timeouts, wall, nil
}

package ndproxy

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/vmlane/vmlane/internal/ra"
)

// MaxPerSecond is how many solicitations a port gets answered in a second:
// a guest that sends more (a flood, a scan of its home subnet) gets no
// more answers, so it cannot make the node send more than this.
const MaxPerSecond = 100

// Router advertisements to a guest (internal/ra's timing, RFC 4861 §6.2.4
// and §10): every raInterval, jittered by a tenth, and in answer to its
// solicitations at most every raMinDelay.
const (
	raInterval = 200 * time.Second
	raMinDelay = 3 * time.Second
)

// nsFilter passes IPv6 frames with next header ICMPv6 whose type is 135, a
// neighbour solicitation, or 133, a router solicitation (offsets from the
// Ethernet header; Parse and IsRouterSolicit check the rest).
var nsFilter = func() []unix.SockFilter {
	prog, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 12, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: 0x86dd, SkipTrue: 6},
		bpf.LoadAbsolute{Off: etherLen + 6, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: protoICMPv6, SkipTrue: 4},
		bpf.LoadAbsolute{Off: etherLen + ipv6Len, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: icmpNS, SkipTrue: 1},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: icmpRS, SkipTrue: 1},
		bpf.RetConstant{Val: 1514},
		bpf.RetConstant{Val: 0},
	})
	if err != nil {
		panic(err)
	}
	out := make([]unix.SockFilter, len(prog))
	for i, r := range prog {
		out[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out
}()

// Responder answers the neighbour solicitations of the guests that moved in
// to a bridge (see the package comment). Its zero value is not usable; make
// one with New.
type Responder struct {
	bridge string
	log    *slog.Logger

	mu    sync.Mutex
	ports map[string]*watch // by port name
	// nl is a netlink handle in the network namespace of the first Sync
	// (the bridge's), for every goroutine, under nlMu.
	nl   *netlink.Handle
	nlMu sync.Mutex

	// advert builds a guest's router advertisement for its home
	// subnet, from the bridge's MAC (nil: none is sent).
	advert func(home netip.Prefix, mac net.HardwareAddr) ([]byte, error)

	// mac is the bridge's, onBridge the addresses on it: replaced whole
	// by Sync and read by every watch.
	mac      atomic.Pointer[net.HardwareAddr]
	onBridge atomic.Pointer[map[netip.Addr]bool]
}

// New makes a Responder for the guests on bridge's ports; it watches none
// until Sync. advert, when not nil, builds the ICMPv6 router advertisement
// a guest gets for its home subnet from the bridge's MAC (ra.Build with
// the node's configuration and that subnet); nil sends none.
func New(bridge string, advert func(home netip.Prefix, mac net.HardwareAddr) ([]byte, error), log *slog.Logger) *Responder {
	if log == nil {
		log = slog.Default()
	}
	return &Responder{bridge: bridge, advert: advert, log: log, ports: map[string]*watch{}}
}

// Sync makes r watch exactly the ports of guests, and answer for none of
// onBridge (the IPv6 addresses of every pod and VM on the bridge). A port
// whose interface was made anew since (a retried CNI ADD) is watched
// anew. It returns the errors of the ports it could not watch; the others
// are watched all the same.
func (r *Responder) Sync(guests []Guest, onBridge []netip.Addr) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.nl == nil {
		nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return fmt.Errorf("netlink: %w", err)
		}
		r.nl = nl
	}
	r.nlMu.Lock()
	br, err := r.nl.LinkByName(r.bridge)
	r.nlMu.Unlock()
	if err != nil {
		return fmt.Errorf("bridge %s: %w", r.bridge, err)
	}
	if len(br.Attrs().HardwareAddr) != 6 {
		return fmt.Errorf("bridge %s has no Ethernet address", r.bridge)
	}
	mac := slices.Clone(br.Attrs().HardwareAddr)
	r.mac.Store(&mac)
	set := make(map[netip.Addr]bool, len(onBridge))
	for _, a := range onBridge {
		set[a] = true
	}
	r.onBridge.Store(&set)

	want := map[string]Guest{}
	for _, g := range guests {
		want[g.Port] = g
	}
	for name, w := range r.ports {
		g, ok := want[name]
		if ok && g.Equal(w.guest) {
			r.nlMu.Lock()
			l, err := r.nl.LinkByName(name)
			r.nlMu.Unlock()
			if err == nil && l.Attrs().Index == w.ifindex {
				continue
			}
		}
		w.close()
		delete(r.ports, name)
	}
	var errs []error
	for name, g := range want {
		if _, ok := r.ports[name]; ok {
			continue
		}
		w, err := r.open(g)
		if err != nil {
			errs = append(errs, fmt.Errorf("port %s: %w", name, err))
			continue
		}
		r.ports[name] = w
	}
	return errors.Join(errs...)
}

// Ports names the ports r watches, sorted.
func (r *Responder) Ports() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.ports))
}

// Close stops watching every port.
func (r *Responder) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, w := range r.ports {
		w.close()
		delete(r.ports, name)
	}
	if r.nl != nil {
		r.nlMu.Lock()
		r.nl.Close()
		r.nl = nil
		r.nlMu.Unlock()
	}
}

// isOnBridge reports whether a is an address on the bridge.
func (r *Responder) isOnBridge(a netip.Addr) bool {
	return (*r.onBridge.Load())[a]
}

// linkLocal is the bridge's link-local IPv6 address that passed duplicate
// address detection, the source of router advertisements; invalid when it
// has none.
func (r *Responder) linkLocal(nl *netlink.Handle) netip.Addr {
	r.nlMu.Lock()
	defer r.nlMu.Unlock()
	ll, _ := ra.LinkLocal(nl, r.bridge)
	return ll
}

// watch is one port's packet socket and the goroutines reading it and
// sending its router advertisements.
type watch struct {
	guest   Guest
	ifindex int
	f       *os.File
	done    chan struct{}
	// solicited wakes the advertiser: the guest sent a router
	// solicitation.
	solicited chan struct{}
	nl        *netlink.Handle // the Responder's
	// the rate limit: answers sent in the second that began at second.
	second time.Time
	sent   int
}

// open opens a packet socket on g's port that sees the frames the guest
// sends (ETH_P_ALL taps them before the bridge takes them), filtered to
// neighbour solicitations, and starts reading it. The socket is made with
// protocol 0, so it sees nothing before its filter is on and it is bound.
func (r *Responder) open(g Guest) (*watch, error) {
	r.nlMu.Lock()
	l, err := r.nl.LinkByName(g.Port)
	r.nlMu.Unlock()
	if err != nil {
		return nil, err
	}
	index := l.Attrs().Index
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("packet socket: %w", err)
	}
	// The frames to the guest need not be tapped (Linux 4.20 and
	// later; older kernels tap them, and run drops them).
	_ = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1)
	prog := unix.SockFprog{Len: uint16(len(nsFilter)), Filter: &nsFilter[0]}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("attaching filter: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: index}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("binding packet socket: %w", err)
	}
	w := &watch{guest: g, ifindex: index, f: os.NewFile(uintptr(fd), "ndproxy:"+g.Port), done: make(chan struct{}),
		solicited: make(chan struct{}, 1), nl: r.nl}
	stopped := make(chan struct{})
	go func() {
		w.run(r)
		close(stopped)
	}()
	go func() {
		w.advertise(r, stopped)
		close(w.done)
	}()
	return w, nil
}

func (w *watch) close() {
	w.f.Close()
	<-w.done
}

// advertise sends the guest its home's router advertisement now, every
// raInterval, and when it solicits one (at most every raMinDelay), until
// stopped.
func (w *watch) advertise(r *Responder, stopped <-chan struct{}) {
	if r.advert == nil {
		<-stopped
		return
	}
	rc, err := w.f.SyscallConn()
	if err != nil {
		<-stopped
		return
	}
	log := r.log.With("port", w.guest.Port, "mac", w.guest.MAC.String())
	warned := false
	var last, noLL time.Time
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-stopped:
			return
		case <-w.solicited:
			if wait := raMinDelay - time.Since(last); wait > 0 {
				t.Reset(wait)
				continue
			}
		case <-t.C:
		}
		ll := r.linkLocal(w.nl)
		if !ll.IsValid() {
			// The bridge's address is still tentative (a node just
			// set up): in a second.
			if noLL.IsZero() {
				noLL = time.Now()
			}
			if time.Since(noLL) > 10*time.Second && !warned {
				log.Warn("sending a moved-in guest its home's router advertisement: the bridge has no link-local address", "bridge", r.bridge)
				warned = true
			}
			t.Reset(time.Second)
			continue
		}
		noLL = time.Time{}
		last = time.Now()
		t.Reset(raInterval*9/10 + rand.N(raInterval/5))
		mac := *r.mac.Load()
		msg, err := r.advert(w.guest.Home, mac)
		if err == nil {
			err = w.send(rc, RouterAdvert(msg, mac, ll))
		}
		if err != nil && !warned {
			log.Warn("sending a moved-in guest its home's router advertisement", "err", err)
			warned = true
		}
	}
}

// run answers the guest's solicitations until the socket is closed.
func (w *watch) run(r *Responder) {
	rc, err := w.f.SyscallConn()
	if err != nil {
		return
	}
	log := r.log.With("port", w.guest.Port, "mac", w.guest.MAC.String())
	buf := make([]byte, 1514)
	warned := false
	for {
		var (
			n    int
			from unix.Sockaddr
			rerr error
		)
		err := rc.Read(func(fd uintptr) bool {
			n, from, rerr = unix.Recvfrom(int(fd), buf, 0)
			return rerr != unix.EAGAIN
		})
		if err != nil {
			return // closed
		}
		if rerr != nil {
			continue
		}
		// The port's own transmissions (frames to the guest) are tapped
		// too.
		if ll, ok := from.(*unix.SockaddrLinklayer); !ok || ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		if IsRouterSolicit(buf[:n]) && bytes.Equal(buf[6:12], w.guest.MAC) {
			select {
			case w.solicited <- struct{}{}:
			default:
			}
			continue
		}
		s, ok := Parse(buf[:n])
		if !ok || !w.guest.Answers(s, r.isOnBridge) || !w.allow(time.Now()) {
			continue
		}
		if err := w.send(rc, Advert(s, *r.mac.Load())); err != nil && !warned {
			log.Warn("answering a moved-in guest's neighbour solicitation", "target", s.Target, "err", err)
			warned = true
		}
	}
}

// send sends frame out of the guest's port.
func (w *watch) send(rc syscall.RawConn, frame []byte) error {
	var serr error
	err := rc.Write(func(fd uintptr) bool {
		serr = unix.Sendto(int(fd), frame, 0, &unix.SockaddrLinklayer{Ifindex: w.ifindex, Halen: 6})
		return serr != unix.EAGAIN
	})
	return errors.Join(err, serr)
}

// allow counts an answer at now against MaxPerSecond.
func (w *watch) allow(now time.Time) bool {
	if now.Sub(w.second) >= time.Second {
		w.second, w.sent = now, 0
	}
	if w.sent >= MaxPerSecond {
		return false
	}
	w.sent++
	return true
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

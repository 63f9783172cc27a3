package ra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// allNodes and allRouters are the link-local multicast groups RAs go to
// and RSs come to.
var (
	allNodes   = net.ParseIP("ff02::1")
	allRouters = net.ParseIP("ff02::2")
)

// Run advertises c on c.Iface until ctx ends, then sends a last
// advertisement with router lifetime 0 so guests drop the bridge as their
// router at once. Advertisements wait for the interface's link-local
// address to be usable (a bridge with no port has none yet: DAD waits for
// carrier). It returns the error that stopped it, or nil when ctx ends.
func Run(ctx context.Context, c Config, log *slog.Logger) error {
	return run(ctx, c, log, timing{initial: maxInitialInterval, minDelay: MinDelayBetweenRAs, poll: time.Second})
}

// timing is what tests shorten.
type timing struct {
	initial  time.Duration // interval of the first advertisements
	minDelay time.Duration // least time between two advertisements
	poll     time.Duration // how often to look for a usable source address
}

func run(ctx context.Context, c Config, log *slog.Logger, tm timing) error {
	c, err := c.withDefaults()
	if err != nil {
		return err
	}
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "ra", "interface", c.Iface)
	ifi, err := net.InterfaceByName(c.Iface)
	if err != nil {
		return fmt.Errorf("ra: %w", err)
	}
	pc, err := listen(ifi)
	if err != nil {
		return fmt.Errorf("ra: on %s: %w", c.Iface, err)
	}
	defer pc.Close()

	solicits := make(chan struct{}, 1)
	go readSolicits(pc, solicits)

	s := sender{c: c, ifi: ifi, pc: pc, log: log}
	sent := 0
	var last time.Time
	next := time.Now() // the first one at once
	t := time.NewTimer(0)
	defer t.Stop()
	log.Info("sending router advertisements", "prefix", c.Prefix, "interval", c.Interval)
	for {
		select {
		case <-ctx.Done():
			if sent > 0 {
				if err := s.send(0); err != nil {
					log.Warn("sending the last router advertisement", "err", err)
				}
			}
			return nil
		case <-solicits:
			// RFC 4861 §6.2.6: answer, but no sooner than minDelay
			// after the last one, after a random delay of up to
			// 500 ms.
			at := time.Now().Add(rand.N(500 * time.Millisecond))
			if a := last.Add(tm.minDelay); at.Before(a) {
				at = a
			}
			if at.Before(next) {
				next = at
				t.Reset(time.Until(next))
			}
			continue
		case <-t.C:
		}
		if err := s.send(c.RouterLifetime); err != nil {
			if !errors.Is(err, errNoSource) {
				log.Warn("sending router advertisement", "err", err)
			}
			next = time.Now().Add(tm.poll)
			t.Reset(tm.poll)
			continue
		}
		sent++
		last = time.Now()
		interval := c.Interval
		if sent <= maxInitialAdverts && tm.initial < interval {
			interval = tm.initial
		}
		// Jitter of ±10 %, so nodes booted together drift apart.
		interval = interval*9/10 + rand.N(interval/5+1)
		next = last.Add(interval)
		t.Reset(interval)
	}
}

// listen opens the raw ICMPv6 socket on ifi: bound to it, in the
// all-routers group, letting in router solicitations only.
func listen(ifi *net.Interface) (*ipv6.PacketConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.SOL_SOCKET, unix.SO_BINDTODEVICE, ifi.Name)
		})
		return errors.Join(err, serr)
	}}
	c, err := lc.ListenPacket(context.Background(), "ip6:ipv6-icmp", "::")
	if err != nil {
		return nil, err
	}
	pc := ipv6.NewPacketConn(c)
	var f ipv6.ICMPFilter
	f.SetAll(true)
	f.Accept(ipv6.ICMPTypeRouterSolicitation)
	err = errors.Join(
		pc.SetICMPFilter(&f),
		pc.SetMulticastHopLimit(255),
		pc.SetHopLimit(255),
		pc.SetMulticastInterface(ifi),
		pc.SetMulticastLoopback(false),
		pc.JoinGroup(ifi, &net.IPAddr{IP: allRouters}),
		pc.SetControlMessage(ipv6.FlagHopLimit|ipv6.FlagInterface, true),
	)
	if err != nil {
		pc.Close()
		return nil, err
	}
	return pc, nil
}

// readSolicits signals each valid router solicitation: hop limit 255
// (RFC 4861 §6.1.1, so it came from the link) and well formed.
func readSolicits(pc *ipv6.PacketConn, out chan<- struct{}) {
	buf := make([]byte, 1500)
	for {
		n, cm, _, err := pc.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		if cm == nil || cm.HopLimit != 255 || !isSolicit(buf[:n]) {
			continue
		}
		select {
		case out <- struct{}{}:
		default:
		}
	}
}

var errNoSource = errors.New("no usable link-local address yet")

type sender struct {
	c   Config
	ifi *net.Interface
	pc  *ipv6.PacketConn
	log *slog.Logger
}

// send advertises to all-nodes from the interface's link-local address.
func (s *sender) send(lifetime time.Duration) error {
	src, err := LinkLocal(&netlink.Handle{}, s.ifi.Name)
	if err != nil {
		return err
	}
	msg, err := Build(s.c, s.ifi.HardwareAddr, lifetime)
	if err != nil {
		return err
	}
	cm := &ipv6.ControlMessage{HopLimit: 255, IfIndex: s.ifi.Index, Src: src.AsSlice()}
	_, err = s.pc.WriteTo(msg, cm, &net.IPAddr{IP: allNodes, Zone: s.ifi.Name})
	return err
}

// LinkLocal is the interface's link-local address, once it has passed
// duplicate address detection: an advertisement must come from one (RFC
// 4861 §6.1.2), and a tentative address cannot send. h is the netlink
// handle of the interface's namespace (&netlink.Handle{}: the caller's).
func LinkLocal(h *netlink.Handle, name string) (netip.Addr, error) {
	l, err := h.LinkByName(name)
	if err != nil {
		return netip.Addr{}, err
	}
	addrs, err := h.AddrList(l, netlink.FAMILY_V6)
	if err != nil {
		return netip.Addr{}, err
	}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if ok && ip.IsLinkLocalUnicast() && a.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) == 0 {
			return ip, nil
		}
	}
	return netip.Addr{}, errNoSource
}

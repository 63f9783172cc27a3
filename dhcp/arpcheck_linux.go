package dhcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmlane/vmlane/internal/rawip"
)

// Holders asks, by ARP from the bridge iface (as srcIP), who holds each of
// the addresses in want (address → MAC), and returns those whose MAC
// answered for its address within wait. It sends three rounds of
// requests, spread over wait.
//
// vmlaned uses it after a restart: a CNI reservation's bind is written
// just after its ACK (LateBindDelay), so a crash in between leaves the
// lease "reserved" while its guest holds the address. A guest that
// answers ARP for its reserved address with its own MAC has been ACKed
// it, so its lease can be marked bound again at once, rather than at the
// guest's next renewal. (With anti-spoofing, no other port can answer
// for it.)
func Holders(ctx context.Context, iface string, srcIP netip.Addr, want map[netip.Addr]net.HardwareAddr, wait time.Duration) (map[netip.Addr]bool, error) {
	held := map[netip.Addr]bool{}
	if len(want) == 0 {
		return held, nil
	}
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ARP)))
	if err != nil {
		return nil, fmt.Errorf("ARP socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: ifi.Index}); err != nil {
		return nil, fmt.Errorf("binding ARP socket to %s: %w", iface, err)
	}
	send := func() error {
		for ip := range want {
			if held[ip] {
				continue
			}
			req := rawip.Ether(rawip.Broadcast, ifi.HardwareAddr, rawip.TypeARP,
				rawip.ARP(1, ifi.HardwareAddr, srcIP, make(net.HardwareAddr, 6), ip))
			if err := unix.Sendto(fd, req, 0, &unix.SockaddrLinklayer{Ifindex: ifi.Index, Halen: 6}); err != nil {
				return fmt.Errorf("sending ARP request for %s: %w", ip, err)
			}
		}
		return nil
	}
	deadline := time.Now().Add(wait)
	nextSend := time.Now()
	buf := make([]byte, 128)
	for len(held) < len(want) && time.Now().Before(deadline) && ctx.Err() == nil {
		if !time.Now().Before(nextSend) {
			if err := send(); err != nil {
				return held, err
			}
			nextSend = time.Now().Add(wait / 3)
		}
		// A zero timeout would block for ever.
		tv := unix.NsecToTimeval(max(time.Millisecond, min(time.Until(nextSend), time.Until(deadline), 100*time.Millisecond)).Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return held, err
		}
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return held, err
		}
		if n < 14 {
			continue
		}
		op, sha, spa, ok := rawip.ParseARP(buf[14:n])
		if ok && op == 2 && want[spa] != nil && sha.String() == want[spa].String() {
			held[spa] = true
		}
	}
	return held, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Package frametest sends and captures raw Ethernet frames in test network
// namespaces, and builds the frames a hostile guest would send: any source
// MAC, any IPv4 source, ARP with any sender, DHCP from any chaddr, 802.1Q
// tags. Tests only.
package frametest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmlane/vmlane/internal/rawip"
)

// Socket is an AF_PACKET socket bound to one interface, seeing every frame
// (ETH_P_ALL), in the namespace it was opened in.
type Socket struct {
	fd      int
	ifindex int
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Open opens a packet socket on ifname. Call it inside the namespace (for
// example from netnstest.NS.Do); the socket stays in that namespace.
func Open(ifname string) (*Socket, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return nil, fmt.Errorf("packet socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("binding packet socket to %s: %w", ifname, err)
	}
	return &Socket{fd: fd, ifindex: ifi.Index}, nil
}

// OpenIn opens a packet socket on ifname inside ns (a netnstest.NS) and
// closes it when t ends.
func OpenIn(t testing.TB, ns interface{ Do(func() error) error }, ifname string) *Socket {
	t.Helper()
	var s *Socket
	if err := ns.Do(func() (err error) { s, err = Open(ifname); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Close closes the socket.
func (s *Socket) Close() error { return unix.Close(s.fd) }

// Send sends frame (Ethernet header included) out of the interface.
func (s *Socket) Send(frame []byte) error {
	return unix.Sendto(s.fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: s.ifindex, Halen: 6})
}

// Wait returns the first frame received within d for which match is true,
// or an error when none came. Frames the socket itself sent are skipped.
func (s *Socket) Wait(d time.Duration, match func([]byte) bool) ([]byte, error) {
	deadline := time.Now().Add(d)
	buf := make([]byte, 65536)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return nil, errors.New("no matching frame")
		}
		tv := unix.NsecToTimeval(left.Nanoseconds())
		if err := unix.SetsockoptTimeval(s.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return nil, err
		}
		n, from, err := unix.Recvfrom(s.fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		if match(buf[:n]) {
			return append([]byte(nil), buf[:n]...), nil
		}
	}
}

// Re-exported from rawip, so tests need one import.
var Broadcast = rawip.Broadcast

const (
	TypeIPv4 = rawip.TypeIPv4
	TypeARP  = rawip.TypeARP
	TypeIPv6 = rawip.TypeIPv6
	TypeVLAN = rawip.TypeVLAN
)

// Ether builds an Ethernet frame.
func Ether(dst, src net.HardwareAddr, etherType uint16, payload []byte) []byte {
	return rawip.Ether(dst, src, etherType, payload)
}

// UDP4 builds an IPv4 UDP packet, checksums filled in.
func UDP4(src, dst netip.Addr, sport, dport uint16, payload []byte) []byte {
	return rawip.UDP4(src, dst, sport, dport, payload)
}

// VLAN builds an 802.1Q-tagged frame.
func VLAN(dst, src net.HardwareAddr, vid uint16, etherType uint16, payload []byte) []byte {
	tag := []byte{byte(vid >> 8), byte(vid), byte(etherType >> 8), byte(etherType)}
	return Ether(dst, src, TypeVLAN, append(tag, payload...))
}

// ARP builds an Ethernet/IPv4 ARP packet (op 1 request, 2 reply).
func ARP(op uint16, sha net.HardwareAddr, spa netip.Addr, tha net.HardwareAddr, tpa netip.Addr) []byte {
	return rawip.ARP(op, sha, spa, tha, tpa)
}

// ICMPEcho4 builds an IPv4 ICMP echo request.
func ICMPEcho4(src, dst netip.Addr, id, seq uint16) []byte {
	icmp := []byte{8, 0, 0, 0, byte(id >> 8), byte(id), byte(seq >> 8), byte(seq)}
	icmp = append(icmp, []byte("vmlane frametest")...)
	binary.BigEndian.PutUint16(icmp[2:], rawip.Checksum(icmp))
	return rawip.IPv4(src, dst, 1, icmp)
}

// RouterAdvert builds an IPv6 ICMPv6 router advertisement from src to
// all-nodes.
func RouterAdvert(src netip.Addr) []byte {
	return ICMPv6(src, netip.MustParseAddr("ff02::1"), []byte{134, 0, 0, 0, 64, 0, 0x07, 0x08, 0, 0, 0, 0, 0, 0, 0, 0})
}

// ICMPv6 builds an IPv6 packet of the ICMPv6 message icmp (its checksum
// bytes are filled in), hop limit 255 as neighbour discovery needs.
func ICMPv6(src, dst netip.Addr, icmp []byte) []byte {
	icmp = append([]byte{}, icmp...)
	s, d := src.As16(), dst.As16()
	pseudo := append(append(append([]byte{}, s[:]...), d[:]...), 0, 0, byte(len(icmp)>>8), byte(len(icmp)), 0, 0, 0, 58)
	binary.BigEndian.PutUint16(icmp[2:], rawip.Checksum(append(pseudo, icmp...)))
	h := make([]byte, 40)
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(len(icmp)))
	h[6] = 58
	h[7] = 255
	copy(h[8:], s[:])
	copy(h[24:], d[:])
	return append(h, icmp...)
}

// ND options: a link-layer address option (type 1 source, 2 target) and
// a DAD nonce (RFC 7527).
func LLAddrOption(typ byte, mac net.HardwareAddr) []byte {
	return append([]byte{typ, 1}, mac...)
}

// NonceOption is a 6-byte nonce option (type 14).
func NonceOption() []byte { return []byte{14, 1, 1, 2, 3, 4, 5, 6} }

// NeighAdvert builds a neighbour advertisement (RFC 4861 4.4) for target
// with the override and solicited flags as given, and options.
func NeighAdvert(src, dst, target netip.Addr, override, solicited bool, options ...[]byte) []byte {
	var flags byte
	if solicited {
		flags |= 0x40
	}
	if override {
		flags |= 0x20
	}
	t := target.As16()
	icmp := append([]byte{136, 0, 0, 0, flags, 0, 0, 0}, t[:]...)
	for _, o := range options {
		icmp = append(icmp, o...)
	}
	return ICMPv6(src, dst, icmp)
}

// NeighSolicit builds a neighbour solicitation (RFC 4861 4.3) for target
// with options.
func NeighSolicit(src, dst, target netip.Addr, options ...[]byte) []byte {
	t := target.As16()
	icmp := append([]byte{135, 0, 0, 0, 0, 0, 0, 0}, t[:]...)
	for _, o := range options {
		icmp = append(icmp, o...)
	}
	return ICMPv6(src, dst, icmp)
}

// RouterSolicit builds a router solicitation (RFC 4861 4.1) with options.
func RouterSolicit(src netip.Addr, options ...[]byte) []byte {
	icmp := []byte{133, 0, 0, 0, 0, 0, 0, 0}
	for _, o := range options {
		icmp = append(icmp, o...)
	}
	return ICMPv6(src, netip.MustParseAddr("ff02::2"), icmp)
}

// Frame is a parsed Ethernet frame, enough of it for tests to match on.
type Frame struct {
	Dst, Src  net.HardwareAddr
	EtherType uint16
	Payload   []byte
}

// Parse splits an Ethernet header off b.
func Parse(b []byte) (Frame, bool) {
	if len(b) < 14 {
		return Frame{}, false
	}
	return Frame{Dst: b[0:6], Src: b[6:12], EtherType: binary.BigEndian.Uint16(b[12:14]), Payload: b[14:]}, true
}

// UDP returns the source and destination of an IPv4 UDP frame and its
// payload; ok is false for anything else.
func (f Frame) UDP() (src, dst netip.AddrPort, payload []byte, ok bool) {
	p := f.Payload
	if f.EtherType != TypeIPv4 || len(p) < 20 || p[0]>>4 != 4 || p[9] != 17 {
		return
	}
	hl := int(p[0]&0xf) * 4
	if len(p) < hl+8 {
		return
	}
	u := p[hl:]
	src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(p[12:16])), binary.BigEndian.Uint16(u[0:]))
	dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(p[16:20])), binary.BigEndian.Uint16(u[2:]))
	return src, dst, u[8:], true
}

// UDP6 builds an IPv6 UDP packet, checksum filled in.
func UDP6(src, dst netip.Addr, sport, dport uint16, payload []byte) []byte {
	udp := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], dport)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	udp = append(udp, payload...)
	s, d := src.As16(), dst.As16()
	pseudo := append(append(append([]byte{}, s[:]...), d[:]...), 0, 0, byte(len(udp)>>8), byte(len(udp)), 0, 0, 0, 17)
	binary.BigEndian.PutUint16(udp[6:], rawip.Checksum(append(pseudo, udp...)))
	h := make([]byte, 40)
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(len(udp)))
	h[6] = 17
	h[7] = 64
	copy(h[8:], s[:])
	copy(h[24:], d[:])
	return append(h, udp...)
}

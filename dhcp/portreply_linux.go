package dhcp

import (
	"fmt"
	"net"
	"net/netip"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/vmlane/vmlane/internal/rawip"
)

// portSender sends replies as whole Ethernet frames straight out of one
// bridge port, from the bridge's MAC and the server's address, so no other
// port of the bridge sees them: not the client's name, not its address.
// The socket is an AF_PACKET one with protocol 0, so it receives nothing.
type portSender struct {
	fd     int
	srcMAC net.HardwareAddr
	srcIP  netip.Addr

	mu    sync.Mutex
	index map[string]int // port name → ifindex, dropped on a send error
}

func newPortSender(iface string, srcIP netip.Addr) (*portSender, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, err
	}
	if len(ifi.HardwareAddr) != 6 {
		return nil, fmt.Errorf("%s has no Ethernet address", iface)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("packet socket for DHCP replies: %w", err)
	}
	return &portSender{fd: fd, srcMAC: ifi.HardwareAddr, srcIP: srcIP, index: map[string]int{}}, nil
}

func (s *portSender) Close() error { return unix.Close(s.fd) }

func (s *portSender) ifindex(port string) (int, error) {
	s.mu.Lock()
	i, ok := s.index[port]
	s.mu.Unlock()
	if ok {
		return i, nil
	}
	ifi, err := net.InterfaceByName(port)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	s.index[port] = ifi.Index
	s.mu.Unlock()
	return ifi.Index, nil
}

// send sends payload to dst:68 as a frame to dstMAC out of port. A
// failed send forgets the port's ifindex and tries once more: a retried
// CNI ADD makes the port again under the same name.
func (s *portSender) send(port string, dstMAC net.HardwareAddr, dst netip.Addr, payload []byte) error {
	frame := rawip.Ether(dstMAC, s.srcMAC, rawip.TypeIPv4, rawip.UDP4(s.srcIP, dst, 67, 68, payload))
	var err error
	for range 2 {
		var i int
		if i, err = s.ifindex(port); err != nil {
			return err
		}
		if err = unix.Sendto(s.fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: i, Halen: 6}); err == nil {
			return nil
		}
		s.mu.Lock()
		delete(s.index, port)
		s.mu.Unlock()
	}
	return err
}

package routes

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// ackTimeout (seconds) bounds the wait for a batch's acks.
const ackTimeout = 10

// batchSize is how many route replaces go to the kernel in one sendmsg.
// Their acks (36 bytes each) come back in one read or a few.
const batchSize = 256

// routeBatch pipelines RTM_NEWROUTE requests on a netlink socket of its
// own: batchSize requests in one sendmsg, then their acks, instead of a
// request, its ack, the next request. A full sync of thousands of routes
// then costs the kernel's work on them and little else: `ip -batch` of
// the same routes waits for each ack before the next request.
type routeBatch struct{ fd int }

// newRouteBatch opens the socket in the calling thread's netns, where it
// stays.
func newRouteBatch() (*routeBatch, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	// Room for the acks of a batch whatever the default buffer size, and
	// a bound on the wait for them: the kernel acks every request, but a
	// reconcile must not hang on one it lost.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 1<<20)
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: ackTimeout}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &routeBatch{fd: fd}, nil
}

// replaceAll replaces rs (each dst via its gateway, with proto, in the
// main table) and returns each one's error, nil for those the kernel
// took. A failure of the socket itself is every unanswered route's error.
func (b *routeBatch) replaceAll(rs []Route, proto int) []error {
	errs := make([]error, len(rs))
	for start := 0; start < len(rs); start += batchSize {
		end := min(start+batchSize, len(rs))
		if err := b.round(rs[start:end], proto, errs[start:end]); err != nil {
			for i := start; i < end; i++ {
				if errs[i] == nil {
					errs[i] = err
				}
			}
		}
	}
	return errs
}

// round sends rs in one sendmsg and fills errs from their acks.
func (b *routeBatch) round(rs []Route, proto int, errs []error) error {
	var buf []byte
	seqs := make(map[uint32]int, len(rs))
	for i, r := range rs {
		req := nl.NewNetlinkRequest(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_REPLACE|unix.NLM_F_ACK)
		msg := nl.NewRtMsg()
		msg.Family = unix.AF_INET
		if r.Dst.Addr().Is6() {
			msg.Family = unix.AF_INET6
		}
		msg.Dst_len = uint8(r.Dst.Bits())
		msg.Protocol = uint8(proto)
		req.AddData(msg)
		req.AddData(nl.NewRtAttr(unix.RTA_DST, r.Dst.Masked().Addr().AsSlice()))
		req.AddData(nl.NewRtAttr(unix.RTA_GATEWAY, r.Via.AsSlice()))
		seqs[req.Seq] = i
		buf = append(buf, req.Serialize()...)
	}
	if err := unix.Sendto(b.fd, buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("sending %d route requests: %w", len(rs), err)
	}
	rb := make([]byte, 64<<10)
	for left := len(rs); left > 0; {
		n, _, err := unix.Recvfrom(b.fd, rb, 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if errors.Is(err, unix.EAGAIN) {
				return fmt.Errorf("%d of %d route requests unanswered after %ds", left, len(rs), ackTimeout)
			}
			return fmt.Errorf("reading route acks: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(rb[:n])
		if err != nil {
			return fmt.Errorf("parsing route acks: %w", err)
		}
		for _, m := range msgs {
			i, ok := seqs[m.Header.Seq]
			if !ok || m.Header.Type != unix.NLMSG_ERROR || len(m.Data) < 4 {
				continue
			}
			delete(seqs, m.Header.Seq)
			left--
			if code := int32(binary.NativeEndian.Uint32(m.Data[:4])); code != 0 {
				errs[i] = syscall.Errno(-code)
			}
		}
	}
	return nil
}

func (b *routeBatch) close() error { return unix.Close(b.fd) }

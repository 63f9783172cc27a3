package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmlane/vmlane/internal/peer"
	"github.com/vmlane/vmlane/routes"
)

// peerLink is this node's end of the live-migration notices (peers.go): a
// UDP socket on the node's address of each family, bound so that what it
// sends comes from an address of this Node, which is what receivers
// check; the cluster's key; and the Nodes to send to.
type peerLink struct {
	key   []byte
	port  uint16
	self  string
	conns []*net.UDPConn // one per family the node has an address of
	nodes func() []routes.Node
	log   *slog.Logger
	// notices counts the notices read, by what came of them.
	notices *prometheus.CounterVec
	// badLog and refusedLog keep a flood of notices from flooding the log.
	badLog, refusedLog logEvery
}

// logEvery allows one log line a period.
type logEvery struct {
	mu     sync.Mutex
	period time.Duration
	last   time.Time
}

func (l *logEvery) allow(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < l.period {
		return false
	}
	l.last = now
	return true
}

// newPeerNoticesCounter is vmlane_peer_notices_total, registered with reg.
func newPeerNoticesCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vmlane_peer_notices_total",
		Help: "Live-migration notices from other nodes, by result: taken, refused (by whom or when it was sent), bad (its MAC or format); lapsed counts the moves, taken or this node's own, whose claims did not follow within the hold time."}, []string{"result"})
	reg.MustRegister(v)
	return v
}

// openPeers binds the notices' sockets to self's addresses (the first of
// each family, as the route controller reads them) at port.
func openPeers(key []byte, port uint16, self routes.Node, nodes func() []routes.Node, notices *prometheus.CounterVec, log *slog.Logger) (*peerLink, error) {
	p := &peerLink{key: key, port: port, self: self.Name, nodes: nodes, notices: notices, log: log,
		badLog: logEvery{period: time.Minute}, refusedLog: logEvery{period: time.Second}}
	for _, v4 := range []bool{true, false} {
		a, ok := self.FirstAddr(v4)
		if !ok {
			continue
		}
		conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, port)))
		if err != nil {
			p.close()
			return nil, fmt.Errorf("live-migration notices (--peer-port): %w", err)
		}
		p.conns = append(p.conns, conn)
	}
	if len(p.conns) == 0 {
		return nil, fmt.Errorf("live-migration notices: node %s has no address to receive them on", self.Name)
	}
	return p, nil
}

func (p *peerLink) close() {
	for _, c := range p.conns {
		c.Close()
	}
}

// send tells every other Node each of notices, at its first address of
// a family this node has a socket of (the other family's if that fails).
// It does not wait for anything: UDP, and a notice lost is a migration
// whose routes move by the API path.
func (p *peerLink) send(notices []peer.Notice) {
	var sealed [][]byte
	for _, n := range notices {
		b, err := peer.Seal(p.key, n)
		if err != nil {
			p.log.Warn("live-migration notice: its claim's update alone moves the VM", "vm", n.VM, "err", err)
			continue
		}
		sealed = append(sealed, b)
	}
	if len(sealed) == 0 {
		return
	}
	sent, failed := 0, 0
	for _, node := range p.nodes() {
		if node.Name == p.self {
			continue
		}
		for _, b := range sealed {
			if p.sendTo(node, b) {
				sent++
			} else {
				failed++
			}
		}
	}
	p.log.Debug("live-migration notices sent", "notices", len(sealed), "sent", sent, "failed", failed)
}

// sendTo sends b to node, and reports whether a socket took it.
func (p *peerLink) sendTo(node routes.Node, b []byte) bool {
	for _, c := range p.conns {
		to, ok := node.FirstAddr(c.LocalAddr().(*net.UDPAddr).IP.To4() != nil)
		if !ok {
			continue
		}
		if _, err := c.WriteToUDPAddrPort(b, netip.AddrPortFrom(to, p.port)); err != nil {
			p.log.Debug("live-migration notice", "node", node.Name, "to", to, "err", err)
			continue
		}
		return true
	}
	return false
}

// serve reads notices until ctx ends and hands each that opens with the
// key to take, which says whether it took it.
func (p *peerLink) serve(ctx context.Context, take func(peer.Notice, netip.Addr) error) {
	go func() {
		<-ctx.Done()
		p.close()
	}()
	for _, c := range p.conns {
		go func(c *net.UDPConn) {
			buf := make([]byte, peer.MaxSize+1)
			for {
				n, src, err := c.ReadFromUDPAddrPort(buf)
				if err != nil {
					if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
						return
					}
					p.log.Warn("reading live-migration notices", "err", err)
					time.Sleep(time.Second)
					continue
				}
				notice, err := peer.Open(p.key, buf[:n])
				if err != nil {
					p.count("bad")
					// A node of another key (the Secret changed and
					// not every vmlaned restarted), or not a notice.
					if p.badLog.allow(time.Now()) {
						p.log.Warn("live-migration notice that does not open with this node's key: a node of another key (restart the DaemonSet after changing the Secret vmlane-peer), or not a notice; said at most once a minute", "from", src, "err", err)
					}
					continue
				}
				if err := take(notice, src.Addr()); err != nil {
					p.count("refused")
					if p.refusedLog.allow(time.Now()) {
						p.log.Info("live-migration notice refused; said at most once a second", "from", src, "err", err)
					}
					continue
				}
				p.count("taken")
			}
		}(c)
	}
}

func (p *peerLink) count(result string) {
	if p.notices != nil {
		p.notices.WithLabelValues(result).Inc()
	}
}

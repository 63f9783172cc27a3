package cluster

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// QMP is a client of a QEMU's machine protocol monitor (a VM pod's, see
// VMGuest.Migration): JSON objects one per line, a greeting first, then
// one reply per command, with asynchronous events between.
type QMP struct {
	conn net.Conn
	r    *bufio.Reader
	// events are the asynchronous events read so far, oldest first.
	events []QMPEvent
}

// QMPEvent is one of QEMU's asynchronous events (STOP, RESUME, ...) and
// when QEMU says it happened (its host clock: the events of two QEMUs on
// one machine compare).
type QMPEvent struct {
	Name string
	At   time.Time
}

// Event is the last event called name read so far.
func (q *QMP) Event(name string) (QMPEvent, bool) {
	for i := len(q.events) - 1; i >= 0; i-- {
		if q.events[i].Name == name {
			return q.events[i], true
		}
	}
	return QMPEvent{}, false
}

// WaitEvent reads until an event called name comes, for up to d, and
// returns it; one read before is returned at once.
func (q *QMP) WaitEvent(name string, d time.Duration) (QMPEvent, error) {
	if e, ok := q.Event(name); ok {
		return e, nil
	}
	_ = q.conn.SetDeadline(time.Now().Add(d))
	for {
		if _, err := q.read(); err != nil {
			return QMPEvent{}, fmt.Errorf("waiting for QMP event %s: %w", name, err)
		}
		if e, ok := q.Event(name); ok {
			return e, nil
		}
	}
}

// DialQMP connects to the monitor at the unix socket path, reads its
// greeting and leaves capabilities negotiation mode, trying for up to
// wait while the socket is not there yet (QEMU still starting).
func DialQMP(path string, wait time.Duration) (*QMP, error) {
	var conn net.Conn
	var err error
	for deadline := time.Now().Add(wait); ; time.Sleep(100 * time.Millisecond) {
		if conn, err = net.Dial("unix", path); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("qmp %s: %w", path, err)
	}
	q := &QMP{conn: conn, r: bufio.NewReader(conn)}
	if _, err := q.read(); err != nil { // the greeting
		conn.Close()
		return nil, fmt.Errorf("qmp %s: greeting: %w", path, err)
	}
	if _, err := q.Execute("qmp_capabilities", nil); err != nil {
		conn.Close()
		return nil, fmt.Errorf("qmp %s: %w", path, err)
	}
	return q, nil
}

// Close closes the connection; QEMU goes on.
func (q *QMP) Close() error { return q.conn.Close() }

// Execute runs command with args (nil for none) and returns its "return"
// value, or the error QEMU replied with. Events that come first are
// skipped.
func (q *QMP) Execute(command string, args any) (json.RawMessage, error) {
	req := map[string]any{"execute": command}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	_ = q.conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := q.conn.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("%s: %w", command, err)
	}
	for {
		m, err := q.read()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", command, err)
		}
		if _, ok := m["event"]; ok {
			continue
		}
		if e, ok := m["error"]; ok {
			return nil, fmt.Errorf("%s: QEMU says %s", command, e)
		}
		if r, ok := m["return"]; ok {
			return r, nil
		}
	}
}

// read reads one message, and keeps it when it is an event.
func (q *QMP) read() (map[string]json.RawMessage, error) {
	line, err := q.r.ReadBytes('\n')
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(line, &m); err != nil {
		return nil, fmt.Errorf("%q: %w", line, err)
	}
	if name, ok := m["event"]; ok {
		var n string
		var at struct {
			Seconds      int64 `json:"seconds"`
			Microseconds int64 `json:"microseconds"`
		}
		if json.Unmarshal(name, &n) == nil && json.Unmarshal(m["timestamp"], &at) == nil {
			q.events = append(q.events, QMPEvent{Name: n, At: time.Unix(at.Seconds, at.Microseconds*1000)})
		}
	}
	return m, nil
}

// MigrationProxy carries a live migration's stream from the source node to
// the target's as KubeVirt's virt-handler does: the source QEMU writes to
// the unix socket listen, a connection from the source node's address
// carries it over TCP to a listener on the target node's address, and
// that one hands it to the target QEMU's incoming socket, target. The
// migration stream never touches the pods' network. The proxy serves one
// migration; close the returned closer when done.
func MigrationProxy(src, dst *RealNode, listen, target string) (io.Closer, error) {
	var tcp net.Listener
	err := dst.NS.Do(func() (err error) {
		// A socket stays in the network namespace it was made in.
		tcp, err = net.Listen("tcp", net.JoinHostPort(dst.IP.String(), "0"))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("migration proxy: listening on %s: %w", dst.Name, err)
	}
	ux, err := net.Listen("unix", listen)
	if err != nil {
		tcp.Close()
		return nil, fmt.Errorf("migration proxy: %w", err)
	}
	p := &migrationProxy{tcp: tcp, ux: ux}
	go func() {
		in, err := tcp.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("unix", target)
		if err != nil {
			in.Close()
			return
		}
		p.pipe(in, out)
	}()
	go func() {
		in, err := ux.Accept()
		if err != nil {
			return
		}
		var out net.Conn
		err = src.NS.Do(func() (err error) {
			out, err = net.Dial("tcp", tcp.Addr().String())
			return err
		})
		if err != nil {
			in.Close()
			return
		}
		p.pipe(in, out)
	}()
	return p, nil
}

type migrationProxy struct {
	tcp, ux net.Listener
	mu      sync.Mutex
	conns   []net.Conn
}

// pipe copies a to b and b to a until either side ends.
func (p *migrationProxy) pipe(a, b net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, a, b)
	p.mu.Unlock()
	go func() { _, _ = io.Copy(b, a); b.Close() }()
	go func() { _, _ = io.Copy(a, b); a.Close() }()
}

func (p *migrationProxy) Close() error {
	p.tcp.Close()
	p.ux.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	return nil
}

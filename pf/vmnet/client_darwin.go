package vmnet

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego/objc"
)

// Lease is a network acquired from a broker: the open connection that
// holds it and its serialization.
type Lease struct {
	x       *xpcLib
	name    string
	conn    unsafe.Pointer
	ser     unsafe.Pointer
	done    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	network unsafe.Pointer
	api     *darwinAPI
}

// AcquireFrom is Acquire from the broker on Mach service service (for
// nirs/vmnet-broker: com.github.nirs.vmnet-broker).
func AcquireFrom(service, name string) (*Lease, error) {
	x, err := openXPC()
	if err != nil {
		return nil, err
	}
	l := &Lease{x: x, name: name, done: make(chan struct{})}
	l.conn = x.createMachService(service, 0, 0)
	if l.conn == nil {
		return nil, &BrokerError{Code: XPCFailure, Network: name}
	}
	h := objc.NewBlock(func(_ objc.Block, ev unsafe.Pointer) {
		if x.getType(ev) == x.typeError && (is(ev, x.errInvalid) || is(ev, x.errInterrupted)) {
			l.once.Do(func() { close(l.done) })
		}
	})
	x.setEventHandler(l.conn, h)
	h.Release()
	x.resume(l.conn)

	msg := x.dictCreateEmpty()
	x.dictSetString(msg, KeyCommand, CommandAcquire)
	x.dictSetString(msg, KeyNetworkName, name)
	reply := x.sendWithReplySync(l.conn, msg)
	x.release(msg)
	defer x.release(reply)
	kind := replyOther
	switch x.getType(reply) {
	case x.typeDictionary:
		kind = replyDictionary
	case x.typeError:
		kind = replyXPCError
	}
	var ser unsafe.Pointer
	var code int64
	if kind == replyDictionary {
		ser = x.dictGetValue(reply, KeyNetwork)
		code = x.dictGetInt64(reply, KeyError)
	}
	if err := replyError(kind, ser != nil, code, name); err != nil {
		x.cancel(l.conn)
		x.release(l.conn)
		return nil, err
	}
	l.ser = x.retain(ser)
	return l, nil
}

// Serialization is the network's XPC serialization (xpc_object_t), valid
// until Close.
func (l *Lease) Serialization() unsafe.Pointer { return l.ser }

// Network is a vmnet_network_ref made from the serialization
// (vmnet_network_create_with_serialization), valid until Close; the same
// one on every call.
func (l *Lease) Network() (unsafe.Pointer, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.network != nil {
		return l.network, nil
	}
	var st uint32
	n := l.x.createWithSerialization(l.ser, &st)
	if Status(st) != Success || n == nil {
		if Status(st) == Success {
			st = uint32(Failure)
		}
		return nil, fmt.Errorf("vmnet_network_create_with_serialization: %w", Status(st))
	}
	l.network = n
	return n, nil
}

// Done is closed when the connection to the broker breaks (it stopped or
// restarted): the hold is gone, and the runtime should acquire again.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Close releases the network and closes the connection, which lets the
// broker know this client no longer holds it.
func (l *Lease) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.network != nil {
		if api, err := OpenAPI(); err == nil {
			api.Release(uintptr(l.network))
		}
		l.network = nil
	}
	if l.ser != nil {
		l.x.release(l.ser)
		l.ser = nil
	}
	if l.conn != nil {
		l.x.cancel(l.conn)
		l.x.release(l.conn)
		l.conn = nil
	}
	return nil
}

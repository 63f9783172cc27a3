package vmnet

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ebitengine/purego/objc"
)

// Listen answers the broker protocol on the Mach service named service
// (launchd must list it in the job's MachServices) for s until the
// returned stop is called. groups gives a user's supplementary groups for
// the Policy check (nil: none). Every event runs on one serial dispatch
// queue, so s sees one call at a time. failed is closed when the listener
// itself fails (the service is not the job's, or launchd cancelled it):
// nothing is answered any more, and the daemon should exit for launchd to
// start it again.
func Listen(service string, s Server, groups func(uid uint32) []uint32) (stop func(), failed <-chan struct{}, err error) {
	x, err := openXPC()
	if err != nil {
		return nil, nil, err
	}
	q := x.queueCreate(service, 0) // DISPATCH_QUEUE_SERIAL is NULL
	l := x.createMachService(service, q, machServiceListener)
	if l == nil {
		return nil, nil, fmt.Errorf("xpc_connection_create_mach_service(%q): no listener (is the service in the launchd job's MachServices?)", service)
	}
	var next uint64
	fail := make(chan struct{})
	var stopped atomic.Bool
	var once sync.Once
	onListener := objc.NewBlock(func(_ objc.Block, ev unsafe.Pointer) {
		switch x.getType(ev) {
		case x.typeConnection:
		case x.typeError:
			if !stopped.Load() {
				once.Do(func() { close(fail) })
			}
			return
		default:
			return
		}
		next++
		id, conn := next, ev
		p := Peer{PID: int(x.getPID(conn)), UID: x.getEUID(conn), GID: x.getEGID(conn)}
		if groups != nil {
			p.Groups = groups(p.UID)
		}
		s.Connected(id, p)
		onPeer := objc.NewBlock(func(_ objc.Block, m unsafe.Pointer) {
			switch x.getType(m) {
			case x.typeDictionary:
				req := Request{Command: x.dictGetString(m, KeyCommand), NetworkName: x.dictGetString(m, KeyNetworkName)}
				rep, ser := s.Request(id, p, req)
				r := x.dictCreateReply(m)
				if r == nil {
					return // not a message that wants a reply
				}
				if rep.Network() {
					x.dictSetValue(r, KeyNetwork, uintptr(ser))
				} else {
					x.dictSetInt64(r, KeyError, int64(rep.Error))
				}
				x.sendMessage(conn, r)
				x.release(r)
			case x.typeError:
				if is(m, x.errInvalid) {
					s.Disconnected(id)
				}
			}
		})
		x.setEventHandler(conn, onPeer)
		onPeer.Release() // the connection holds its copy
		x.setTargetQueue(conn, q)
		x.resume(conn)
	})
	x.setEventHandler(l, onListener)
	onListener.Release()
	x.resume(l)
	return func() { stopped.Store(true); x.cancel(l) }, fail, nil
}

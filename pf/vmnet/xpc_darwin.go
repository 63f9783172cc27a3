package vmnet

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/ebitengine/purego/objc"
)

// xpcLib is the slice of libxpc and libdispatch (both in libSystem) that
// the broker protocol needs, bound through purego from <xpc/xpc.h> and
// <dispatch/dispatch.h>. Objects are pointers (xpc_object_t,
// xpc_connection_t, dispatch_queue_t); handlers are blocks
// (purego/objc.NewBlock).
type xpcLib struct {
	createMachService       func(name string, queue uintptr, flags uint64) unsafe.Pointer
	setEventHandler         func(conn unsafe.Pointer, handler objc.Block)
	setTargetQueue          func(conn unsafe.Pointer, queue uintptr)
	resume                  func(conn unsafe.Pointer)
	cancel                  func(conn unsafe.Pointer)
	getType                 func(obj unsafe.Pointer) uintptr
	getEUID, getEGID        func(conn unsafe.Pointer) uint32
	getPID                  func(conn unsafe.Pointer) int32
	dictCreateEmpty         func() unsafe.Pointer
	dictCreateReply         func(request unsafe.Pointer) unsafe.Pointer
	dictGetString           func(dict unsafe.Pointer, key string) string
	dictGetValue            func(dict unsafe.Pointer, key string) unsafe.Pointer
	dictGetInt64            func(dict unsafe.Pointer, key string) int64
	dictSetString           func(dict unsafe.Pointer, key, value string)
	dictSetInt64            func(dict unsafe.Pointer, key string, value int64)
	dictSetValue            func(dict unsafe.Pointer, key string, value uintptr)
	sendMessage             func(conn, msg unsafe.Pointer)
	sendWithReplySync       func(conn, msg unsafe.Pointer) unsafe.Pointer
	retain                  func(obj unsafe.Pointer) unsafe.Pointer
	release                 func(obj unsafe.Pointer)
	queueCreate             func(label string, attr uintptr) uintptr
	createWithSerialization func(ser unsafe.Pointer, status *uint32) unsafe.Pointer

	// The addresses of XPC_TYPE_CONNECTION, XPC_TYPE_DICTIONARY,
	// XPC_TYPE_ERROR and the two connection errors (XPC_GLOBAL_OBJECT:
	// the address of the symbol is the value).
	typeConnection, typeDictionary, typeError uintptr
	errInvalid, errInterrupted                uintptr
}

// XPC_CONNECTION_MACH_SERVICE_LISTENER.
const machServiceListener = 1 << 0

var (
	xpcOnce sync.Once
	xpcImpl *xpcLib
	xpcErr  error
)

func openXPC() (*xpcLib, error) {
	xpcOnce.Do(func() { xpcImpl, xpcErr = loadXPC() })
	return xpcImpl, xpcErr
}

func loadXPC() (*xpcLib, error) {
	sys, err := purego.Dlopen(libSystemPath, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("opening libSystem: %w", err)
	}
	vm, err := purego.Dlopen(vmnetPath, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("opening vmnet: %w", err)
	}
	x := &xpcLib{}
	for _, b := range []struct {
		lib  uintptr
		name string
		fn   any
	}{
		{sys, "xpc_connection_create_mach_service", &x.createMachService},
		{sys, "xpc_connection_set_event_handler", &x.setEventHandler},
		{sys, "xpc_connection_set_target_queue", &x.setTargetQueue},
		{sys, "xpc_connection_resume", &x.resume},
		{sys, "xpc_connection_cancel", &x.cancel},
		{sys, "xpc_get_type", &x.getType},
		{sys, "xpc_connection_get_euid", &x.getEUID},
		{sys, "xpc_connection_get_egid", &x.getEGID},
		{sys, "xpc_connection_get_pid", &x.getPID},
		{sys, "xpc_dictionary_create_empty", &x.dictCreateEmpty},
		{sys, "xpc_dictionary_create_reply", &x.dictCreateReply},
		{sys, "xpc_dictionary_get_string", &x.dictGetString},
		{sys, "xpc_dictionary_get_value", &x.dictGetValue},
		{sys, "xpc_dictionary_get_int64", &x.dictGetInt64},
		{sys, "xpc_dictionary_set_string", &x.dictSetString},
		{sys, "xpc_dictionary_set_int64", &x.dictSetInt64},
		{sys, "xpc_dictionary_set_value", &x.dictSetValue},
		{sys, "xpc_connection_send_message", &x.sendMessage},
		{sys, "xpc_connection_send_message_with_reply_sync", &x.sendWithReplySync},
		{sys, "xpc_retain", &x.retain},
		{sys, "xpc_release", &x.release},
		{sys, "dispatch_queue_create", &x.queueCreate},
		{vm, "vmnet_network_create_with_serialization", &x.createWithSerialization},
	} {
		if _, err := purego.Dlsym(b.lib, b.name); err != nil {
			return nil, fmt.Errorf("%s is missing: %w", b.name, err)
		}
		purego.RegisterLibFunc(b.fn, b.lib, b.name)
	}
	for _, s := range []struct {
		name string
		addr *uintptr
	}{
		{"_xpc_type_connection", &x.typeConnection},
		{"_xpc_type_dictionary", &x.typeDictionary},
		{"_xpc_type_error", &x.typeError},
		{"_xpc_error_connection_invalid", &x.errInvalid},
		{"_xpc_error_connection_interrupted", &x.errInterrupted},
	} {
		a, err := purego.Dlsym(sys, s.name)
		if err != nil {
			return nil, fmt.Errorf("%s is missing: %w", s.name, err)
		}
		*s.addr = a
	}
	return x, nil
}

// is reports whether obj is the global object at addr (an XPC error).
func is(obj unsafe.Pointer, addr uintptr) bool { return uintptr(obj) == addr }

package vmnet

import (
	"fmt"
	"slices"
)

// The broker protocol, as nirs/vmnet-broker defines it (its
// docs/protocol.md): a client sends an XPC dictionary
// {command: "acquire", network_name: NAME} on the Mach service and gets
// back {network: SERIALIZATION} or {error: CODE}; it keeps its connection
// open for as long as it uses the network. vmlane-vmnet answers the same
// messages on its own service, so a client of the broker (vmnet-helper
// --network, the broker's client library) reaches vmlane's network by
// pointing at ServiceName.
const (
	// ServiceName is vmlane-vmnet's Mach service (the broker's is
	// com.github.nirs.vmnet-broker).
	ServiceName = "dev.vmlane.vmnet"
	// DefaultNetworkName is the name the pod network is acquired by.
	DefaultNetworkName = "pod"

	KeyCommand     = "command"
	KeyNetworkName = "network_name"
	KeyNetwork     = "network"
	KeyError       = "error"
	CommandAcquire = "acquire"
)

// ErrorCode is the broker's reply error (vmnet_broker_return_t); 1 and 2
// are the client's own (the message did not go, the reply made no sense).
type ErrorCode int64

// The broker's error codes.
const (
	XPCFailure     ErrorCode = 1
	InvalidReply   ErrorCode = 2
	NotAllowed     ErrorCode = 3
	InvalidRequest ErrorCode = 4
	NotFound       ErrorCode = 5
	CreateFailure  ErrorCode = 6
	InternalError  ErrorCode = 7
)

var codeNames = map[ErrorCode]string{
	XPCFailure: "XPC_FAILURE", InvalidReply: "INVALID_REPLY", NotAllowed: "NOT_ALLOWED",
	InvalidRequest: "INVALID_REQUEST", NotFound: "NOT_FOUND", CreateFailure: "CREATE_FAILURE",
	InternalError: "INTERNAL_ERROR",
}

// String is the code's name in the broker's protocol.
func (c ErrorCode) String() string {
	if n, ok := codeNames[c]; ok {
		return n
	}
	return fmt.Sprintf("error %d", int64(c))
}

// BrokerError is an error reply, as Acquire returns it.
type BrokerError struct {
	Code ErrorCode
	// Network is the name asked for.
	Network string
}

func (e *BrokerError) Error() string {
	why := map[ErrorCode]string{
		NotAllowed:     "this user is neither root nor in vmlane-vmnet's --group",
		InvalidRequest: "the request was malformed",
		NotFound:       "no network of that name (vmlane-vmnet --network-name)",
		CreateFailure:  "vmlane-vmnet holds no network now (see its log and `vmlanectl` / vmlaned's /healthz)",
	}[e.Code]
	if why == "" {
		return fmt.Sprintf("acquiring vmnet network %q: %s", e.Network, e.Code)
	}
	return fmt.Sprintf("acquiring vmnet network %q: %s: %s", e.Network, e.Code, why)
}

// Request is an acquire request as read off the wire; a key that is
// absent or not a string reads as "".
type Request struct {
	Command, NetworkName string
}

// Peer is the client process, from its XPC connection
// (xpc_connection_get_euid, _get_egid, _get_pid) and its user's groups.
type Peer struct {
	PID      int
	UID, GID uint32
	// Groups are the user's supplementary groups.
	Groups []uint32
}

// Policy says who may acquire the network: root always, and the members
// of Group when HasGroup.
type Policy struct {
	Group    uint32
	HasGroup bool
}

// Allowed reports whether p may acquire the network.
func (pol Policy) Allowed(p Peer) bool {
	if p.UID == 0 {
		return true
	}
	return pol.HasGroup && (p.GID == pol.Group || slices.Contains(p.Groups, pol.Group))
}

// Reply is the answer to a request: Error, or (Error 0) the network's
// serialization.
type Reply struct {
	Error ErrorCode
}

// Network reports whether the reply carries the network.
func (r Reply) Network() bool { return r.Error == 0 }

// Handle answers one request of peer, for a daemon serving the network
// named name; served is whether it holds the network now. A peer the
// policy does not allow learns nothing else: NOT_ALLOWED comes first.
// Pure: table-tested.
func Handle(req Request, p Peer, pol Policy, name string, served bool) Reply {
	switch {
	case !pol.Allowed(p):
		return Reply{Error: NotAllowed}
	case req.Command != CommandAcquire, req.NetworkName == "":
		return Reply{Error: InvalidRequest}
	case req.NetworkName != name:
		return Reply{Error: NotFound}
	case !served:
		return Reply{Error: CreateFailure}
	}
	return Reply{}
}

// Server is what the XPC listener (Listen) calls: the daemon's side of the
// protocol. The listener serialises the calls on one dispatch queue.
type Server interface {
	// Connected and Disconnected bracket a client's connection; a client
	// holds what it acquired until its connection goes.
	Connected(id uint64, p Peer)
	Disconnected(id uint64)
	// Request answers a request on connection id; with a reply that
	// carries the network, the serialization to send, which stays valid
	// until the reply is sent.
	Request(id uint64, p Peer, req Request) (Reply, XPCObject)
}

// replyKind is what an XPC reply was: a dictionary, an XPC error (the
// connection failed, the service is not there) or something else.
type replyKind int

const (
	replyDictionary replyKind = iota
	replyXPCError
	replyOther
)

// replyError reads a reply to an acquire of name: nil when it carries a
// network, else the error. Pure: table-tested.
func replyError(kind replyKind, hasNetwork bool, code int64, name string) error {
	switch {
	case kind == replyXPCError:
		return &BrokerError{Code: XPCFailure, Network: name}
	case kind != replyDictionary:
		return &BrokerError{Code: InvalidReply, Network: name}
	case hasNetwork:
		return nil
	case code == 0:
		return &BrokerError{Code: InvalidReply, Network: name}
	}
	return &BrokerError{Code: ErrorCode(code), Network: name}
}

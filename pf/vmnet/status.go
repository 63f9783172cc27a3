package vmnet

import "fmt"

// Status is vmnet_return_t.
type Status uint32

// vmnet_return_t's values (vmnet/vmnet.h). SharingServiceBusy and
// NotAuthorized came with macOS 11 and 12.
const (
	Success            Status = 1000
	Failure            Status = 1001
	MemFailure         Status = 1002
	InvalidArgument    Status = 1003
	SetupIncomplete    Status = 1004
	InvalidAccess      Status = 1005
	PacketTooBig       Status = 1006
	BufferExhausted    Status = 1007
	TooManyPackets     Status = 1008
	SharingServiceBusy Status = 1009
	NotAuthorized      Status = 1010
)

var statusNames = map[Status]string{
	Success: "VMNET_SUCCESS", Failure: "VMNET_FAILURE", MemFailure: "VMNET_MEM_FAILURE",
	InvalidArgument: "VMNET_INVALID_ARGUMENT", SetupIncomplete: "VMNET_SETUP_INCOMPLETE",
	InvalidAccess: "VMNET_INVALID_ACCESS", PacketTooBig: "VMNET_PACKET_TOO_BIG",
	BufferExhausted: "VMNET_BUFFER_EXHAUSTED", TooManyPackets: "VMNET_TOO_MANY_PACKETS",
	SharingServiceBusy: "VMNET_SHARING_SERVICE_BUSY", NotAuthorized: "VMNET_NOT_AUTHORIZED",
}

// String is the constant's name in vmnet.h, or its number.
func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("vmnet_return_t(%d)", uint32(s))
}

// Error makes a Status an error; callers compare with errors.Is.
func (s Status) Error() string { return s.String() }

// Mode is vmnet_mode_t (operating_modes_t).
type Mode uint32

// vmnet's operating modes.
const (
	HostMode    Mode = 1000
	SharedMode  Mode = 1001
	BridgedMode Mode = 1002
)

// String is the constant's name in vmnet.h.
func (m Mode) String() string {
	switch m {
	case HostMode:
		return "VMNET_HOST_MODE"
	case SharedMode:
		return "VMNET_SHARED_MODE"
	case BridgedMode:
		return "VMNET_BRIDGED_MODE"
	}
	return fmt.Sprintf("vmnet_mode_t(%d)", uint32(m))
}

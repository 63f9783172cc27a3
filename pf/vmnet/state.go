package vmnet

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"time"

	"github.com/vmlane/vmlane/internal/atomicfile"
)

// DefaultStatePath is where vmlane-vmnet reports what it holds, for
// vmlaned's /healthz, readiness and the Node's condition.
const DefaultStatePath = "/var/db/vmlane/vmnet-state.json"

// Heartbeat is how often vmlane-vmnet rewrites its state when nothing
// changes; a state older than three of them is a daemon that stopped.
const Heartbeat = 10 * time.Second

// Phase is what vmlane-vmnet is doing.
type Phase string

const (
	// PhaseWaiting: no network description yet (vmlaned has not written
	// the podCIDR), or it does not parse.
	PhaseWaiting Phase = "waiting"
	// PhaseServing: the network is held on the podCIDR and served.
	PhaseServing Phase = "serving"
	// PhaseRefused: vmnet would not make the network, or made it on
	// another subnet (Message says which); nothing is served.
	PhaseRefused Phase = "refused"
)

// State is vmlane-vmnet's state file.
type State struct {
	Version int       `json:"version"`
	PID     int       `json:"pid"`
	Updated time.Time `json:"updated"`
	// Service and Network are the Mach service and the name the network
	// is acquired by.
	Service string `json:"service"`
	Network string `json:"network"`
	Phase   Phase  `json:"phase"`
	// Want is the subnet asked for; Subnet and IPv6 are what vmnet
	// reported it took (serving only).
	Want   netip.Prefix `json:"want,omitzero"`
	Subnet netip.Prefix `json:"subnet,omitzero"`
	IPv6   netip.Prefix `json:"ipv6,omitzero"`
	// Bridge is the interface holding the gateway address (none before a
	// VM starts on the network).
	Bridge string `json:"bridge,omitempty"`
	// Clients is the number of connections holding the network.
	Clients int `json:"clients"`
	// Pending says a newer description waits for the clients to let the
	// network go (vmnet cannot change a network that exists).
	Pending string `json:"pending,omitempty"`
	Message string `json:"message,omitempty"`
}

// WriteState writes st to path atomically, world-readable, making its
// folder if need be (vmlane-vmnet may start before vmlaned made it).
func WriteState(path string, st State) error {
	st.Version = 1
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFileAll(path, append(data, '\n'), 0o644)
}

// ReadState reads vmlane-vmnet's state file.
func ReadState(path string) (State, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return State{}, err
	}
	st, err := ParseState(data)
	if err != nil {
		return State{}, fmt.Errorf("%s: %w", path, err)
	}
	return st, nil
}

// ParseState reads a state file's content.
func ParseState(data []byte) (State, error) {
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		return State{}, err
	}
	if st.Version != 1 {
		return State{}, fmt.Errorf("version %d, want 1", st.Version)
	}
	return st, nil
}

// Verdict is vmlaned's reading of the state.
type Verdict int

const (
	// NotServed: vmlane-vmnet is not running, has not reported lately,
	// waits for the description, or vmnet refused the network.
	NotServed Verdict = iota
	// Served: the network is held on the podCIDR.
	Served
	// WrongSubnet: vmlane-vmnet serves a network on another subnet (the
	// podCIDR changed and clients still hold the old one), or vmnet made
	// it elsewhere.
	WrongSubnet
)

// CheckState is vmlaned's view of vmlane-vmnet's state, read at now with
// err the read's error, against the node's podCIDR: the verdict and a
// message for the log, an Event and the Node's condition. Pure.
func CheckState(st State, err error, podCIDR netip.Prefix, now time.Time) (Verdict, string) {
	const how = " (sudo launchctl print system/dev.vmlane.vmnet; its log is /var/log/vmlane-vmnet.log)"
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return NotServed, "vmlane-vmnet has never reported: is it installed and running?" + how
	case err != nil:
		return NotServed, fmt.Sprintf("vmlane-vmnet's state is unreadable: %v", err)
	case now.Sub(st.Updated) > 3*Heartbeat:
		return NotServed, fmt.Sprintf("vmlane-vmnet has not reported since %s: is it running?%s", st.Updated.UTC().Format(time.RFC3339), how)
	case st.Phase == PhaseRefused && st.Subnet.IsValid() && st.Subnet != podCIDR:
		return WrongSubnet, fmt.Sprintf("vmnet made the pod network on %s, not on podCIDR %s; vmlane-vmnet serves nothing: %s", st.Subnet, podCIDR, st.Message)
	case st.Phase == PhaseRefused:
		return NotServed, fmt.Sprintf("vmnet refused the pod network on %s: %s", st.Want, st.Message)
	case st.Phase != PhaseServing:
		return NotServed, fmt.Sprintf("vmlane-vmnet is %s: %s", st.Phase, st.Message)
	case st.Subnet != podCIDR:
		msg := fmt.Sprintf("vmlane-vmnet serves the pod network on %s, not on podCIDR %s", st.Subnet, podCIDR)
		if st.Clients > 0 {
			msg += fmt.Sprintf("; %d clients still hold it, and the new one is made when they let it go", st.Clients)
		}
		return WrongSubnet, msg
	}
	bridge := st.Bridge
	if bridge == "" {
		bridge = "no bridge until a VM starts"
	}
	return Served, fmt.Sprintf("vmlane-vmnet serves the pod network %q on podCIDR %s (%s; %d clients)", st.Network, podCIDR, bridge, st.Clients)
}

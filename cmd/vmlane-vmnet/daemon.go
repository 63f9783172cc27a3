package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/vmlane/vmlane/pf"
	"github.com/vmlane/vmlane/pf/vmnet"
)

// daemon holds the node's pod network and serves it. Its logic is plain Go
// over vmnet.API and the vmnet.Server calls, so that it is tested on any
// system with the recording fake; run_darwin.go wires in the real vmnet
// and XPC.
type daemon struct {
	api       vmnet.API
	log       *slog.Logger
	descPath  string // the network description vmlaned writes
	statePath string
	service   string
	name      string
	opts      vmnet.Options
	policy    vmnet.Policy
	// ifaces lists the Mac's interfaces (for the bridge and the overlap
	// report), now is the clock; tests set both.
	ifaces func() []pf.Iface
	now    func() time.Time
	pid    int

	mu      sync.Mutex
	held    *vmnet.Held
	spec    vmnet.Spec // what held was made from
	clients map[uint64]bool
	st      vmnet.State
	written time.Time // when the state file was last written
	lastMsg string    // the last problem logged, so it is logged once
	// refused and refusedAt are the last spec vmnet refused and when: the
	// same spec is tried again only every retryRefused.
	refused   vmnet.Spec
	refusedAt time.Time
}

// retryRefused is how often a network vmnet refused is tried again while
// its description stays the same (what refused it, a VPN on the subnet,
// may go).
const retryRefused = 30 * time.Second

func newDaemon(api vmnet.API, log *slog.Logger) *daemon {
	return &daemon{api: api, log: log, descPath: pf.DefaultNetworkFile, statePath: vmnet.DefaultStatePath,
		service: vmnet.ServiceName, name: vmnet.DefaultNetworkName, now: time.Now, pid: os.Getpid(),
		ifaces: func() []pf.Iface { return nil }, clients: map[uint64]bool{}}
}

// readSpec reads the description vmlaned wrote.
func (d *daemon) readSpec() (vmnet.Spec, error) {
	data, err := os.ReadFile(d.descPath)
	if err != nil {
		return vmnet.Spec{}, err
	}
	var n pf.Network
	if err := json.Unmarshal(data, &n); err != nil {
		return vmnet.Spec{}, fmt.Errorf("%s: %w", d.descPath, err)
	}
	s, err := vmnet.SpecFrom(n, d.opts)
	if err != nil {
		return vmnet.Spec{}, fmt.Errorf("%s: %w", d.descPath, err)
	}
	return s, nil
}

// sync makes what is held follow the description: the first network once
// the description is there, a new one when it changed and no client holds
// the old one (vmnet cannot change a network that exists), and a new try
// after vmnet refused. It writes the state file when anything changed, and
// at least every vmnet.Heartbeat.
func (d *daemon) sync() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.syncLocked()
}

// syncLocked is sync with d.mu held.
func (d *daemon) syncLocked() {
	before := d.st
	spec, err := d.readSpec()
	switch {
	case err != nil && d.held != nil:
		// Keep serving what clients hold; say why nothing changes.
		d.st.Pending = ""
		d.problem("the network description is unreadable; the network held stays as it is", err)
	case errors.Is(err, fs.ErrNotExist):
		d.st = vmnet.State{Phase: vmnet.PhaseWaiting, Message: "no network description at " + d.descPath + " yet (vmlaned writes it from the node's podCIDR)"}
	case err != nil:
		d.st = vmnet.State{Phase: vmnet.PhaseWaiting, Message: err.Error()}
		d.problem("the network description is unreadable", err)
	case d.held != nil && spec.Equal(d.spec):
		d.st.Pending = ""
	case d.held == nil && d.st.Phase == vmnet.PhaseRefused && spec.Equal(d.refused) && d.now().Sub(d.refusedAt) < retryRefused:
		// Refused a moment ago: keep the finding until the retry.
	case d.held != nil && len(d.clients) > 0:
		d.st.Pending = fmt.Sprintf("the description changed (subnet %s); the new network is made when the %d clients holding this one let it go", spec.Subnet, len(d.clients))
	default:
		if d.held != nil {
			d.log.Info("the description changed and no client holds the network: making it anew", "old", d.spec.Subnet, "new", spec.Subnet)
			d.held.Release(d.api)
			d.held = nil
		}
		d.create(spec)
	}
	if d.held != nil {
		d.st.Bridge = vmnet.BridgeOf(d.ifaces(), d.spec.Gateway())
	}
	d.st.Clients = len(d.clients)
	d.writeState(before)
}

// create makes the network of spec, and records the outcome in d.st.
func (d *daemon) create(spec vmnet.Spec) {
	h, err := vmnet.Create(d.api, spec)
	if err != nil {
		st := vmnet.State{Phase: vmnet.PhaseRefused, Want: spec.Subnet, Message: err.Error()}
		var mm *vmnet.MismatchError
		switch {
		case errors.As(err, &mm) && mm.Family == "IPv4":
			st.Subnet = mm.Got
		case errors.Is(err, vmnet.ErrCreate):
			if o := vmnet.Overlapping(d.ifaces(), spec.Subnet); len(o) > 0 {
				st.Message += "; the subnet is in use here: " + strings.Join(o, ", ")
			}
		}
		d.st = st
		d.refused, d.refusedAt = spec, d.now()
		d.problem("vmnet refused the pod network", errors.New(st.Message))
		return
	}
	for _, p := range h.Problems {
		d.log.Warn("reservation left out of the network", "problem", p)
	}
	d.held, d.spec = h, spec
	d.st = vmnet.State{Phase: vmnet.PhaseServing, Want: spec.Subnet, Subnet: h.Subnet, IPv6: h.IPv6}
	d.lastMsg = ""
	d.log.Info("holding the pod network", "network", d.name, "subnet", h.Subnet, "ipv6", h.IPv6, "reservations", len(spec.Reservations)-len(h.Problems),
		"nat44", !spec.DisableNAT44, "nat66", !spec.DisableNAT66)
}

// problem logs a problem once, until it changes.
func (d *daemon) problem(msg string, err error) {
	if key := msg + err.Error(); key != d.lastMsg {
		d.lastMsg = key
		d.log.Error(msg, "err", err)
	}
}

// writeState writes the state file when it differs from before, or when
// the last write is a heartbeat old.
func (d *daemon) writeState(before vmnet.State) {
	now := d.now()
	d.st.Service, d.st.Network, d.st.PID, d.st.Version = d.service, d.name, d.pid, 1
	before.Updated = d.st.Updated
	if d.st == before && now.Sub(d.written) < vmnet.Heartbeat {
		return
	}
	d.st.Updated = now
	if err := vmnet.WriteState(d.statePath, d.st); err != nil {
		d.log.Error("writing the state file", "path", d.statePath, "err", err)
		return
	}
	d.written = now
}

// Connected logs a client.
func (d *daemon) Connected(id uint64, p vmnet.Peer) {
	d.log.Debug("client connected", "conn", id, "pid", p.PID, "uid", p.UID, "gid", p.GID)
}

// Request answers a client (vmnet.Handle) and counts it as holding the
// network once it has it.
func (d *daemon) Request(id uint64, p vmnet.Peer, req vmnet.Request) (vmnet.Reply, vmnet.XPCObject) {
	d.mu.Lock()
	defer d.mu.Unlock()
	rep := vmnet.Handle(req, p, d.policy, d.name, d.held != nil)
	if !rep.Network() {
		d.log.Warn("request refused", "conn", id, "pid", p.PID, "uid", p.UID, "command", req.Command, "network", req.NetworkName, "error", rep.Error)
		return rep, 0
	}
	if !d.clients[id] {
		d.clients[id] = true
		d.log.Info("client holds the pod network", "conn", id, "pid", p.PID, "uid", p.UID, "clients", len(d.clients))
		before := d.st
		d.st.Clients = len(d.clients)
		d.writeState(before)
	}
	return rep, d.held.Serialization
}

// Disconnected lets a client's hold go; a description that waited for
// the last client is applied at once.
func (d *daemon) Disconnected(id uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.clients[id] {
		return
	}
	delete(d.clients, id)
	d.log.Info("client let the pod network go", "conn", id, "clients", len(d.clients))
	d.syncLocked()
}

// stop releases the network (VMs that rebuilt it from the serialization
// hold their own references) and records that nothing is served.
func (d *daemon) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.held != nil {
		d.held.Release(d.api)
		d.held = nil
	}
	before := d.st
	d.st = vmnet.State{Phase: vmnet.PhaseWaiting, Message: "vmlane-vmnet stopped"}
	d.writeState(before)
}

package routes

import (
	"log/slog"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
)

// NATBackend keeps the pod NAT exemption and forwarding on a system
// without iptables: macOS, where a pf anchor exempts pod-to-pod traffic
// from vmnet's NAT and a sysctl turns forwarding on (cmd/vmlaned wires
// package pf in, so routes does not import it). It is
// given the same NATOptions, one per family with a pod subnet, that the
// Linux iptables chains are rendered from.
type NATBackend interface {
	// Ensure makes the exemption hold for nat. Unless full, it may trust
	// what it applied before and do nothing when nat has not changed; a
	// full pass (the resync tick) checks the system and repairs it.
	Ensure(nat []NATOptions, full bool) error
}

// NewAnchorController is NewController for a node whose NAT exemption is
// a NATBackend instead of iptables (a macOS node: table is NewBSDTable,
// nat is vmlaned's pf backend). The informer, the desired-state computation,
// Reconcile and the Loop are the same as on Linux; only the kernel
// effects differ. Masquerade is the system's business there (vmnet NATs
// everything the anchor does not exempt), so o.Masquerade is ignored.
func NewAnchorController(client kubernetes.Interface, table routeTable, nat NATBackend, recorder record.EventRecorder, m *Metrics, log *slog.Logger, o Options) *Controller {
	o.Masquerade = false
	c := NewController(client, table, nil, nil, recorder, m, log, o)
	c.loop.After = nat.Ensure
	return c
}

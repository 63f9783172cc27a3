package routes

import (
	"log/slog"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
)

// natBackend keeps the pod NAT exemption and forwarding on a system
// without iptables: macOS, where a pf anchor exempts pod-to-pod traffic
// from vmnet's NAT and a sysctl turns forwarding on (NewPFBackend). It is
// given the same NATOptions, one per family with a pod subnet, that the
// Linux iptables chains are rendered from.
type natBackend interface {
	// Ensure makes the exemption hold for nat. Unless full, it may trust
	// what it applied before and do nothing when nat has not changed; a
	// full pass (the resync tick) checks the system and repairs it.
	Ensure(nat []NATOptions, full bool) error
}

// NewAnchorController is NewController for a node whose NAT exemption is
// a natBackend instead of iptables (a macOS node: table is NewBSDTable,
// nat is NewPFBackend). The informer, the desired-state computation,
// Reconcile and the Loop are the same as on Linux; only the kernel
// effects differ. Masquerade is the system's business there (vmnet NATs
// everything the anchor does not exempt), so o.Masquerade is ignored.
func NewAnchorController(client kubernetes.Interface, table routeTable, nat natBackend, recorder record.EventRecorder, m *Metrics, log *slog.Logger, o Options) *Controller {
	o.Masquerade = false
	c := NewController(client, table, nil, nil, recorder, m, log, o)
	c.loop.After = func(full bool) error { return nat.Ensure(c.nat, full) }
	return c
}

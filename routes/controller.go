package routes

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
)

// Options configure the Controller.
type Options struct {
	// NodeName is this node; its own podCIDRs are not routed.
	NodeName string
	// NodeIPAnnotation names an annotation whose address, when present,
	// is the node's next hop instead of its InternalIP.
	NodeIPAnnotation string
	// ClusterCIDRs is the pod network; empty means every node's podCIDRs.
	ClusterCIDRs []netip.Prefix
	// Masquerade NATs pod traffic that leaves the pod network.
	Masquerade bool
	// Protocol marks vmlane's routes (DefaultProtocol when 0).
	Protocol int
	// Resync is how often the kernel state is checked even without
	// events (30 s when 0).
	Resync time.Duration
	// VMNodesOnly, Services and RouteServices are Policy's: routes-only
	// mode, and the Service path of nodes without kube-proxy.
	VMNodesOnly   bool
	Services      []netip.Prefix
	RouteServices bool
	// CrossSubnet is the --cross-subnet mode (CrossSubnetOff when
	// empty). With CrossSubnetVXLAN, Tunnel carries what direct routes
	// cannot; with CrossSubnetBGP, a peer that is not on-link is the
	// fabric's to reach and raises no Event.
	CrossSubnet string
	Tunnel      Tunnel
	// Announcer, with CrossSubnetBGP, is told what the node announces
	// (Desired.Announce) at every reconcile, and at a move of VMs of this
	// node's that SetVMs handles without one.
	Announcer Announcer
}

// Announcer announces a node's prefixes to the fabric (package bgp's
// Speaker): it is handed the whole set each time, and makes the
// announcements exactly that.
type Announcer interface {
	Announce([]netip.Prefix)
}

// noPodCIDRsGrace is how long a Node may go without podCIDRs before it
// is reported: node IPAM gives a new node its podCIDRs within seconds,
// and a CNI with its own IPAM (Calico's, Cilium's cluster-pool) never.
const noPodCIDRsGrace = time.Minute

// Controller watches Nodes and keeps routes and iptables in step.
type Controller struct {
	opts     Options
	log      *slog.Logger
	informer cache.SharedIndexInformer
	lister   corelisters.NodeLister
	queue    workqueue.TypedRateLimitingInterface[string]
	loop     *Loop
	early    *earlyRoutes
	recorder record.EventRecorder
	metrics  *Metrics
	// nodesGen counts Node events that change anything routes read.
	nodesGen atomic.Uint64

	mu       sync.Mutex
	reported map[string]bool // node/reason pairs already logged and evented
	gateways []Route         // the Service gateways last logged
	vms      []VM            // SetVMs's

	// podCIDRs is PodCIDRs's answer for the Nodes' generation
	// podCIDRsGen (nil: none yet).
	podCIDRsMu  sync.Mutex
	podCIDRs    []netip.Prefix
	podCIDRsGen uint64

	// announcePods and ownPodCIDRs are the last reconcile's
	// (Desired.announcePods, Desired.own), for a move's announcement;
	// the loop's lock guards them.
	announcePods, ownPodCIDRs []netip.Prefix

	lastOK atomic.Int64 // unix nanos of the last successful reconcile

	ready     chan struct{} // closed by the first reconcile
	readyOnce sync.Once
}

// changesRoutes reports whether a Node's update from a to b can change
// what this node routes. Routes-only mode (VMNodesOnly) reads nothing of
// the nodes that are VM nodes neither before nor after, other than
// itself: at 5,000 Nodes each reconcile costs ~15 ms of CPU, and
// `make bench` measured one per address change of an unrelated Node.
func (c *Controller) changesRoutes(a, b *corev1.Node) bool {
	if SameForRoutes(a, b) {
		return false
	}
	if c.opts.VMNodesOnly && a.Name != c.opts.NodeName &&
		a.Labels[VMNodeLabel] != "true" && b.Labels[VMNodeLabel] != "true" {
		return false
	}
	return true
}

// syncKey is the only workqueue key: every Node event asks for one full
// reconcile, which reads all Nodes from the lister. Collapsing events into
// one key lets a burst of 5,000 Node updates cost a few reconciles.
const syncKey = "sync"

// NewController wires an informer on Nodes (slimmed by Slim) to a Loop over
// table and ipt (one per address family: [IPv4, IPv6], either may be nil).
func NewController(client kubernetes.Interface, table routeTable, ipt4, ipt6 iptablesInterface, recorder record.EventRecorder, m *Metrics, log *slog.Logger, o Options) *Controller {
	if o.Protocol == 0 {
		o.Protocol = DefaultProtocol
	}
	if o.Resync == 0 {
		o.Resync = 30 * time.Second
	}
	early := newEarlyRoutes()
	inf := nodeInformer(client, o.NodeIPAnnotation, early)
	c := &Controller{
		opts:     o,
		log:      log,
		informer: inf,
		lister:   corelisters.NewNodeLister(inf.GetIndexer()),
		early:    early,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "vmlane-nodes"}),
		recorder: recorder,
		metrics:  m,
		reported: map[string]bool{},
		ready:    make(chan struct{}),
	}
	if o.CrossSubnet == "" {
		o.CrossSubnet = CrossSubnetOff
	}
	c.loop = &Loop{Table: table, IPT4: ipt4, IPT6: ipt6, Proto: o.Protocol, Resync: o.Resync, Desired: c.desired, Observe: c.observe, Log: log, Tunnel: o.Tunnel,
		Fabric: o.CrossSubnet == CrossSubnetBGP}
	c.loop.Init()
	enqueue := func(kind string) func(any) {
		return func(any) {
			m.informerEvent(kind)
			c.nodesGen.Add(1)
			c.queue.Add(syncKey)
		}
	}
	c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue("add"),
		UpdateFunc: func(old, n any) {
			// The kubelet updates every Node's status every few seconds
			// (heartbeats, images, conditions); the slimmed objects differ
			// then only in resourceVersion. At 5,000 nodes that is ~17
			// updates a second, each of which would cost a full reconcile.
			if a, ok := old.(*corev1.Node); ok {
				if b, ok := n.(*corev1.Node); ok && !c.changesRoutes(a, b) {
					if !SameForRoutes(a, b) {
						c.nodesGen.Add(1) // not this node's routes, but a Node changed
					}
					m.informerEvent("unchanged")
					return
				}
			}
			enqueue("update")(n)
		},
		// The lister already lacks the node, and a tombstone
		// (cache.DeletedFinalStateUnknown) needs no unwrapping: the key
		// is the same for every event.
		DeleteFunc: enqueue("delete"),
	})
	return c
}

// Run starts the informer and reconciles until ctx ends. Nothing is
// deleted before the informer has synced: an empty cache must not look
// like a cluster without nodes.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	// The early phase (stream.go) has the table until the informer has
	// synced; the loop has it from then on.
	earlyCtx, stopEarly := context.WithCancel(ctx)
	earlyDone := make(chan earlyResult, 1)
	go func() {
		earlyDone <- c.early.run(earlyCtx, c.loop.Table, c.loop.Proto,
			Policy{Self: c.opts.NodeName, VMNodesOnly: c.opts.VMNodesOnly}, c.log)
	}()
	go c.informer.Run(ctx.Done())
	// WaitFor wakes the moment the list is in the cache; WaitForCacheSync
	// would poll every 100 ms, which at 5,000 nodes was most of the time
	// from start to the first route spent outside the kernel.
	synced := cache.WaitFor(ctx, "", c.informer.HasSyncedChecker())
	c.early.close()
	stopEarly()
	early := <-earlyDone
	if !synced {
		return fmt.Errorf("node informer did not sync: %w", ctx.Err())
	}
	c.log.Info("node informer synced", "nodes", len(c.informer.GetStore().ListKeys()),
		"nodesStreamed", early.Streamed, "routesWhileListing", early.Installed, "refusedWhileListing", early.Refused, "firstRoute", early.First)
	go func() {
		for c.processNext() {
		}
	}()
	go c.loop.Run(ctx)
	<-ctx.Done()
	return nil
}

// Trigger asks for a reconcile (the kernel lost a route).
func (c *Controller) Trigger() { c.loop.Trigger() }

func (c *Controller) processNext() bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	c.loop.Trigger()
	return true
}

// LastSuccess is when a reconcile last succeeded (zero: never).
func (c *Controller) LastSuccess() time.Time {
	if n := c.lastOK.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// Ready is closed once the first reconcile has run, which Run starts only
// after the informer has synced: from then on the kernel holds the routes
// of every node the cluster had (those that could be installed), and the
// node can say its network is up.
func (c *Controller) Ready() <-chan struct{} { return c.ready }

// Node returns this controller's view of a node from the informer cache.
func (c *Controller) Node(name string) (*corev1.Node, error) { return c.lister.Get(name) }

// NodesGeneration counts the changes to the Nodes that matter to routes
// (addresses, podCIDRs, readiness, labels; not heartbeats): a caller that
// derived something from the Nodes knows by it when to derive it again.
func (c *Controller) NodesGeneration() uint64 { return c.nodesGen.Load() }

// Synced reports whether the Node informer has listed the cluster's Nodes
// once: before, Node and PodCIDRs know none of them.
func (c *Controller) Synced() bool { return c.informer.HasSynced() }

// Nodes is every Node in the cache, as the controller reads them.
func (c *Controller) Nodes() []Node { return c.nodes() }

func (c *Controller) nodes() []Node {
	objs, err := c.lister.List(labels.Everything())
	if err != nil {
		c.log.Error("listing nodes from cache", "err", err)
		return nil
	}
	out := make([]Node, 0, len(objs))
	for _, o := range objs {
		n := FromNode(o, c.opts.NodeIPAnnotation)
		for _, p := range n.Problems {
			c.reportOnce(o, "VmlaneBadNode", p)
		}
		out = append(out, n)
	}
	return out
}

func (c *Controller) desired() Desired {
	start := time.Now()
	d := Compute(c.nodes(), Policy{Self: c.opts.NodeName, VMNodesOnly: c.opts.VMNodesOnly, Services: c.opts.Services, RouteServices: c.opts.RouteServices, VMs: c.vmList(),
		Tunnel: c.opts.Tunnel != nil, Announce: c.opts.Announcer != nil})
	if c.opts.Announcer != nil {
		c.announcePods, c.ownPodCIDRs = d.announcePods, d.own
		c.opts.Announcer.Announce(d.Announce)
	}
	for _, s := range d.Skips {
		if s.NoPodCIDRs {
			if time.Since(s.Created) < noPodCIDRsGrace {
				continue // node IPAM has not got to it yet
			}
			s.Reason = noPodCIDRsMessage(s.Node, c.opts.VMNodesOnly)
		}
		c.reportOnceByName(s.Node, "VmlaneRouteSkipped", s.Reason)
	}
	c.logGateways(d.Gateways)
	d = d.WithNAT(c.opts.ClusterCIDRs, c.opts.Masquerade)
	c.metrics.observeCompute(time.Since(start))
	return d
}

// noPodCIDRsMessage says why a node without podCIDRs gets no route.
func noPodCIDRsMessage(node string, vmNodesOnly bool) string {
	if vmNodesOnly {
		return fmt.Sprintf("node %s is labelled %s=true but has no podCIDRs: no route to it; a VM node needs podCIDRs from node IPAM (kube-controller-manager --allocate-node-cidrs)", node, VMNodeLabel)
	}
	return fmt.Sprintf("node %s has no podCIDRs: its CNI gives pods addresses from its own IPAM (Calico IPAM, Cilium cluster-pool), which vmlane cannot route to; use an IPAM mode that follows Node podCIDRs (docs/hybrid.md)", node)
}

// logGateways logs the Service gateways when they change.
func (c *Controller) logGateways(gws []Route) {
	c.mu.Lock()
	same := slices.Equal(gws, c.gateways)
	c.gateways = gws
	c.mu.Unlock()
	if same {
		return
	}
	for _, r := range gws {
		c.log.Info("Service gateway", "services", r.Dst, "node", r.Node, "via", r.Via)
	}
}

func (c *Controller) observe(out Outcome, err error) {
	c.metrics.observe(out, err)
	c.readyOnce.Do(func() { close(c.ready) })
	// A failed reconcile is retried with the queue's backoff (5 ms,
	// doubling, per failure in a row), not left to the resync tick; a
	// success resets the backoff.
	if err != nil {
		c.queue.AddRateLimited(syncKey)
	} else {
		c.queue.Forget(syncKey)
	}
	for _, r := range out.Unreachable {
		if c.opts.CrossSubnet == CrossSubnetBGP {
			continue // the fabric routes it: every node announces its own
		}
		c.reportOnceByName(r.Node, "VmlaneNextHopUnreachable",
			fmt.Sprintf("route %s not installed: next hop %s is not directly reachable from node %s", r.Dst, r.Via, c.opts.NodeName))
	}
	for _, s := range out.TunnelSkips {
		c.reportOnceByName(s.Node, "VmlaneRouteSkipped", s.Reason)
	}
	if out.TunnelErr != nil {
		c.reportOnceByName(c.opts.NodeName, "VmlaneVXLANFailed", fmt.Sprintf(
			"VXLAN device %s on node %s: %v; peers that are not on-link are not reached", c.opts.Tunnel.Device(), c.opts.NodeName, out.TunnelErr))
	}
	for _, r := range out.Foreign {
		c.log.Warn("a route of another owner holds a pod subnet; leaving it", "route", r.String())
	}
	for _, o := range out.Overlaps {
		c.reportOnceByName(o.Route.Node, "VmlaneRouteOverlap", fmt.Sprintf(
			"route %s of node %s overlaps route %s of another owner (protocol %d) on node %s: the longer prefix wins for the addresses both cover; vmlane leaves the other route alone",
			o.Route, o.Route.Node, o.Other, o.Other.Proto, c.opts.NodeName))
	}
	if err == nil {
		c.lastOK.Store(time.Now().UnixNano())
	}
}

func (c *Controller) reportOnceByName(node, reason, msg string) {
	n, err := c.lister.Get(node)
	if err != nil {
		return
	}
	c.reportOnce(n, reason, msg)
}

// reportOnce logs and records an Event once per node, reason and message,
// so a resync every 30 s does not flood the log or the API server.
func (c *Controller) reportOnce(n *corev1.Node, reason, msg string) {
	k := n.Name + "\x00" + reason + "\x00" + msg
	c.mu.Lock()
	seen := c.reported[k]
	c.reported[k] = true
	c.mu.Unlock()
	if seen {
		return
	}
	c.log.Warn(msg, "node", n.Name, "reason", reason)
	if c.recorder != nil {
		ref := &corev1.ObjectReference{Kind: "Node", Name: n.Name, UID: n.UID, APIVersion: "v1"}
		c.recorder.Event(ref, corev1.EventTypeWarning, reason, msg)
	}
}

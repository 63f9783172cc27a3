package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/vmlane/vmlane/internal/atomicfile"
	"github.com/vmlane/vmlane/internal/ndproxy"
	"github.com/vmlane/vmlane/internal/peer"
	"github.com/vmlane/vmlane/leases"
	"github.com/vmlane/vmlane/plugin"
	"github.com/vmlane/vmlane/routes"
)

// vmClaimGVR is the VMClaim resource (manifests/base/vmclaims.yaml).
var vmClaimGVR = schema.GroupVersionResource{Group: "vmlane.io", Version: "v1alpha1", Resource: "vmclaims"}

// claimsPoll is how often the publisher looks at the lease file (a stat;
// it reads the file only when the stat changed): a VM's claim is in the
// API well within 2 s of the ADD that made its lease.
const claimsPoll = 200 * time.Millisecond

// claimsResync is how often a pass runs when nothing changed: a claim
// deleted or edited by hand comes back as the leases say, and a VM's
// addresses held here for it while it runs elsewhere get their hold time
// renewed.
const claimsResync = 30 * time.Second

// claimsSync keeps the node's VM leases and the cluster's VMClaims in step
// (claims.go says how), and applies the claims to the node: the copy the
// CNI plugin reads (plugin.ClaimsFileName), the route controller's VM host
// routes, the addresses this node's subnets lend to VMs running elsewhere
// (held here so nothing else gets them) and the NDP proxy entries that let
// this node's pods reach those VMs by IPv6.
type claimsSync struct {
	c      *config
	api    dynamic.NamespaceableResourceInterface
	claims cache.Store
	store  *leases.Store
	ctrl   *routes.Controller
	log    *slog.Logger
	// warned remembers the last problem said of each claim, so a claim
	// that stays bad is logged once.
	warned map[string]string
	mirror []byte
	// changes is the keys of the claims the informer saw change since
	// list last took them (nil without an informer's handler: tests).
	// parsed is each VMClaim object of the cache as a full list last read
	// it, and listed what list last returned. stale is the VMs whose
	// claims the lists since the last apply found new, changed or gone,
	// staleAll that one of them could not say which: apply checks those
	// again.
	changes  *claimChanges
	parsed   map[*unstructured.Unstructured]claim
	listed   []claim
	stale    map[string]bool
	staleAll bool
	// applied is apply's last result and the pod network it was checked
	// against: a pass that finds the claims and the network as they were
	// uses it again.
	applied struct {
		ok      bool
		cluster []netip.Prefix
		// nodesGen is the Nodes' generation it was checked against: a
		// node going down, coming up or going away changes what claims
		// are usable and the copy's Live flags.
		nodesGen uint64
		vms      []routes.VM
		mirror   plugin.ClaimsFile
		lent     []plugin.NodeClaim
		// mirrorJSON is mirror as writeMirror encoded it.
		mirrorJSON []byte
		// expires is when the first of the claims it used that are held
		// reaches its hold time (zero: none held): from then the result
		// is checked again.
		expires time.Time
	}
	// checks is check's verdict on each claim, by VM, against applied's
	// network and Nodes: a pass checks again only the claims that
	// changed (or all, when the network or the Nodes did); clash is the
	// usable ones' addresses and MACs, for the claims that clash.
	checks map[string]*claimCheck
	clash  *clashIndex
	// net is the pod network the checks were made against, as a set.
	net *prefixSet
	// proxies is the bridge's NDP proxy table (netlinkProxies), hosts its
	// host routes (bridgeHostRoutes).
	proxies neighProxies
	hosts   hostRouter
	// frames is the bridge's record of the MACs it heard (netlinkFrames),
	// ann what the node remembers of live migrations, and awaited the MACs
	// of migrating guests, for the watcher that wakes a pass when the
	// bridge first hears one (watchFrames).
	frames  bridgeFrames
	ann     announcements
	awaited awaitedMACs
	// away writes the bridge's table of MACs of VMs that run elsewhere
	// and of the ports of VMs that moved in (bridge.SyncAway when nil);
	// awayMACs and awayPorts are what it last wrote (awayAt when; zero:
	// nothing written yet).
	away      func(bridge string, local []netip.Prefix, macs, ports []string) error
	awayMACs  []string
	awayPorts []string
	awayAt    time.Time
	// nd answers the IPv6 neighbour solicitations of the guests that
	// moved in, for their home subnets (an ndproxy.Responder, made at
	// the first such guest, when nil); ndGuests and ndOnBridge are what
	// it was last given (ndAt when), ndErr its last error, said once.
	nd         ndResponder
	ndGuests   []ndproxy.Guest
	ndOnBridge []netip.Addr
	ndAt       time.Time
	ndErr      string
	// nodes, when set, answers node and nodesGen instead of the route
	// controller's cache, and now the time for hold times (tests).
	nodes nodeSource
	now   func() time.Time
	// passTime observes each pass's time from reading the claims to
	// handing the VMs to the route controller (nil: not observed).
	passTime prometheus.Observer
	// moves is the live migrations this node knows of ahead of their
	// claims' updates (peers.go), peers its end of the notices that tell
	// the other nodes (nil: no key, see startPeers).
	moves peerMoves
	peers *peerLink
	// notices counts the notices by what came of them, and the moves
	// that lapsed (nil: not counted).
	notices *prometheus.CounterVec
}

// newClaimsPassHistogram is vmlane_claims_pass_duration_seconds, registered
// with reg.
func newClaimsPassHistogram(reg prometheus.Registerer) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "vmlane_claims_pass_duration_seconds",
		Help:    "Time of a VMClaims pass, from reading the claims to handing the VMs' host routes to the route controller.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)})
	reg.MustRegister(h)
	return h
}

// nodeSource is the cluster's Nodes: the route controller's cache, or a
// test's.
type nodeSource interface {
	Node(name string) (routes.Node, bool)
	NodesGeneration() uint64
}

// runClaims runs claimsSync until ctx ends. Without the VMClaim CRD
// (manifests older than VM identity) it says so once and VM identity stays
// node-local; it looks again every resync.
func runClaims(ctx context.Context, dyn dynamic.Interface, c *config, subnet netip.Prefix, ctrl *routes.Controller, passTime prometheus.Observer, notices *prometheus.CounterVec, log *slog.Logger) {
	log = log.With("component", "claims")
	opts := []leases.Option{leases.WithNode(c.NodeName), leases.WithVMHold(c.VMHoldTime)}
	if s6 := c.PodCIDR6; s6.IsValid() {
		opts = append(opts, leases.WithSubnet6(s6, s6.Addr().Next()))
	}
	store, err := leases.Open(c.LeaseFile, subnet, subnet.Addr().Next(), opts...)
	if err != nil {
		log.Error("lease store: VMs keep their addresses on this node only", "err", err)
		return
	}
	api := dyn.Resource(vmClaimGVR)
	changes := &claimChanges{}
	inf, kick := claimsInformer(ctx, dyn, changes, log)
	if inf == nil || !waitNodes(ctx, ctrl) {
		return
	}
	s := &claimsSync{c: c, api: api, claims: inf.GetStore(), changes: changes, store: store, ctrl: ctrl, log: log, warned: map[string]string{}, passTime: passTime,
		proxies: netlinkProxies{}, frames: netlinkFrames{}, hosts: bridgeHostRoutes{}}
	heardKick := make(chan struct{}, 1)
	go watchFrames(ctx, &s.awaited, func() {
		select {
		case heardKick <- struct{}{}:
		default:
		}
	}, log)
	peerKick := make(chan struct{}, 1)
	peerPoke := func() {
		select {
		case peerKick <- struct{}{}:
		default:
		}
	}
	var peersTried time.Time
	defer func() {
		if s.nd != nil {
			s.nd.Close()
		}
	}()
	poll := time.NewTicker(claimsPoll)
	defer poll.Stop()
	var lastStat os.FileInfo
	var lastPass time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-heardKick:
		case <-peerKick:
		case <-poll.C:
			st, err := os.Stat(c.LeaseFile)
			same := err == nil && lastStat != nil && os.SameFile(st, lastStat) && st.ModTime().Equal(lastStat.ModTime()) &&
				st.Size() == lastStat.Size()
			if errors.Is(err, os.ErrNotExist) {
				same = lastStat == nil && !lastPass.IsZero() // still no lease file
			}
			// While a live migration waits for its guest, every poll
			// looks at the bridge (a wake-up from watchFrames is the
			// fast path; this is the one that cannot be missed); while
			// a move is known ahead of its claim, every poll sees
			// whether it ran out.
			if same && time.Since(lastPass) < claimsResync && s.awaited.empty() && !s.moves.pending() {
				continue
			}
			lastStat = st
		}
		lastPass = time.Now()
		// The key's Secret is optional, and the kubelet puts it in place
		// within a minute or two of its creation: until then every
		// resync looks for it.
		if s.peers == nil && c.PeerKeyFile != "" && time.Since(peersTried) >= claimsResync {
			peersTried = time.Now()
			s.startPeers(ctx, notices, peerPoke)
		}
		s.pass(ctx)
	}
}

// claimsInformer waits for the VMClaim CRD (saying once that it is
// missing: manifests older than VM identity keep VMs node-local), then
// starts an informer of every VMClaim and returns it synced, with a channel
// that gets a value after any change. nil when ctx ends first.
func claimsInformer(ctx context.Context, dyn dynamic.Interface, changes *claimChanges, log *slog.Logger) (cache.SharedIndexInformer, <-chan struct{}) {
	api := dyn.Resource(vmClaimGVR)
	for warned := false; ; {
		_, err := api.List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil {
			break
		}
		if !warned {
			if apierrors.IsNotFound(err) {
				log.Warn("the VMClaim CRD (vmclaims.vmlane.io) is not installed: VMs keep their addresses on their node only; apply vmlane's manifests to make them cluster-wide")
			} else {
				log.Warn("listing VMClaims", "err", err)
			}
			warned = true
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(claimsResync):
		}
	}
	kick := make(chan struct{}, 1)
	poke := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	inf := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0).ForResource(vmClaimGVR).Informer()
	// The cache keeps what a pass reads and nothing else (no managed
	// fields, labels or annotations): at 10,000 claims that is tens of
	// MiB of the daemon's memory.
	if err := inf.SetTransform(slimClaim); err != nil {
		log.Warn("VMClaim informer", "err", err)
	}
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { changes.note(o); poke() },
		UpdateFunc: func(_, o any) { changes.note(o); poke() },
		DeleteFunc: func(o any) { changes.note(o); poke() },
	})
	go inf.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, nil
	}
	return inf, kick
}

// waitNodes waits for the route controller's Node cache to list the
// cluster: a claims pass before it would find every claim's node gone and
// its pod subnets unknown, and drop every VM's routes and its copy for the
// plugin. false when ctx ends first.
func waitNodes(ctx context.Context, ctrl *routes.Controller) bool {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for !ctrl.Synced() {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

// runClaimRoutes is routes-only mode's part of VM identity: every VMClaim
// watched, and the host routes of VMs away from their home subnets handed
// to the route controller, so the nodes of another CNI reach a VM that
// moved. It publishes nothing: the node holds no VM.
func runClaimRoutes(ctx context.Context, dyn dynamic.Interface, c *config, ctrl *routes.Controller, passTime prometheus.Observer, notices *prometheus.CounterVec, log *slog.Logger) {
	log = log.With("component", "claims")
	changes := &claimChanges{}
	inf, kick := claimsInformer(ctx, dyn, changes, log)
	if inf == nil || !waitNodes(ctx, ctrl) {
		return
	}
	s := &claimsSync{c: c, claims: inf.GetStore(), changes: changes, ctrl: ctrl, log: log, warned: map[string]string{}}
	t := time.NewTicker(claimsResync)
	defer t.Stop()
	// A node of another CNI holds no VM, so it sends no live-migration
	// notices, but it takes them (a host that is no node has no address
	// of a Node to take them on).
	peerKick := make(chan struct{}, 1)
	var peersTried time.Time
	for {
		if s.peers == nil && c.PeerKeyFile != "" && c.NodeName != "" && time.Since(peersTried) >= claimsResync {
			peersTried = time.Now()
			s.startPeers(ctx, notices, func() {
				select {
				case peerKick <- struct{}{}:
				default:
				}
			})
		}
		start := time.Now()
		vms, _, _ := s.apply(s.overlay(s.list()))
		ctrl.SetVMs(vms)
		if passTime != nil {
			passTime.Observe(time.Since(start).Seconds())
		}
		// While a move is known ahead of its claim, a pass every poll
		// sees whether it ran out.
		var expiry <-chan time.Time
		if s.moves.pending() {
			expiry = time.After(claimsPoll)
		}
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-peerKick:
		case <-expiry:
		case <-t.C:
		}
	}
}

// pass is one round: publish, then apply.
func (s *claimsSync) pass(ctx context.Context) {
	// The host routes are listed before the leases are read: the plugin
	// writes a lease before it adds its route, so a route listed here
	// has its lease in the file read next.
	start := time.Now()
	routed, rerr := s.hosts.List(s.c.Bridge)
	snap, err := leases.Read(s.c.LeaseFile)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("reading the lease file", "err", err)
		return
	}
	want := map[string]claimStatus{}
	var file *leases.File
	if snap != nil {
		file = &snap.File
		want = leaseClaims(file, s.c.NodeName)
	}
	have := s.list()
	heard := s.heard(want, have, vmPorts(file))
	acts, conflicts := planClaims(want, have, s.c.NodeName, s.nodeUp, heard)
	for _, c := range conflicts {
		s.warnOnce(c.VM, "VM lease and VMClaim disagree; the claim is kept: "+c.String())
	}
	if notices := s.takeHeard(acts, heard, time.Now()); len(notices) > 0 {
		// A migrated guest is heard here: this node routes it here, then
		// tells the other nodes, before it updates the claim, which
		// takes a round trip to the API server and a watch to each.
		s.dataplane(file, routed, rerr, s.overlay(have), nil, start, func() {
			if s.peers != nil {
				go s.peers.send(notices)
			}
		})
		routed, rerr = s.hosts.List(s.c.Bridge)
		start = time.Time{}
	}
	var owner types.UID
	if n, err := s.ctrl.Node(s.c.NodeName); err == nil {
		owner = n.UID
	}
	var done []claimAction
	for _, a := range acts {
		if err := applyClaim(ctx, s.api, a, owner); err != nil {
			s.log.Warn("VMClaim", "action", a.String(), "err", err)
			continue
		}
		done = append(done, a)
		if heard[a.VM] {
			s.log.Info("VMClaim: live migration: the guest is heard on this node's bridge; its routes move here", "action", a.String())
			continue
		}
		s.log.Info("VMClaim", "action", a.String())
	}
	s.dataplane(file, routed, rerr, s.overlay(have), done, start, nil)
}

// overlay is have with the moves this node knows ahead of their claims
// (peerMoves.overlay); the claims it shows otherwise than the last pass
// are checked again.
func (s *claimsSync) overlay(have []claim) []claim {
	return s.moves.overlay(have, time.Now(), func(vm string) {
		if s.stale == nil {
			s.stale = map[string]bool{}
		}
		s.stale[vm] = true
	}, func(vm string, mv peerMove) {
		if mv.Node == s.c.NodeName {
			s.log.Warn("live migration: this node heard the guest but could not update its VMClaim within the notices' hold time; the VM is routed as its claim says until an update is made", "vm", vm, "pod", mv.Pod, "hold", peerHold)
		} else {
			s.log.Warn("live-migration notice: the VM's claim did not follow it within its hold time; the VM is routed as its claim says again (a migration whose target failed, or a node sending notices it should not)", "vm", vm, "node", mv.Node, "pod", mv.Pod, "hold", peerHold)
		}
		if s.notices != nil {
			s.notices.WithLabelValues("lapsed").Inc()
		}
	})
}

// takeHeard has this node take, ahead of their updates, the claims of the
// migrated guests it heard (acts' updates of heard VMs that name this
// node), and returns the notices that tell the other nodes so: one for
// each move that is news (a pass that plans the same update again, its
// last one failed, takes and tells nothing more; the move's hold counts
// from the first).
func (s *claimsSync) takeHeard(acts []claimAction, heard map[string]bool, now time.Time) []peer.Notice {
	var notices []peer.Notice
	for _, a := range acts {
		if a.Op != "update" || !heard[a.VM] || a.Status.Node != s.c.NodeName || a.Status.Pod == "" {
			continue
		}
		if s.moves.add(a.VM, peerMove{Node: s.c.NodeName, Pod: a.Status.Pod, RV: a.ResourceVersion, Until: now.Add(peerHold)}) {
			notices = append(notices, peer.Notice{From: s.c.NodeName, VM: a.VM, Pod: a.Status.Pod, ResourceVersion: a.ResourceVersion, Sent: now.UnixMilli()})
		}
	}
	return notices
}

// dataplane applies the claims (have, and done: the calls this pass made)
// to the node: the bridge's host routes, the route controller's VMs, the
// addresses lent and their NDP proxies, the table of VMs away, the
// answers to guests that moved in, and the plugin's copy. A start that is
// not zero is when the pass began, for its histogram. afterRoutes, when
// not nil, is called once the route controller has the VMs, and the copy
// is left to the pass's second call.
func (s *claimsSync) dataplane(file *leases.File, routed []netip.Prefix, rerr error, have []claim, done []claimAction, start time.Time, afterRoutes func()) {
	// The bridge's host routes follow the claims as they are now: a VM
	// whose claim this pass took (a migration's guest heard here) gets
	// its host route at once, one claimed elsewhere loses it.
	if rerr != nil {
		s.log.Warn("listing the bridge's host routes", "bridge", s.c.Bridge, "err", rerr)
	} else {
		s.sweepHostRoutes(file, routed, claimedElsewhere(have, done, s.c.NodeName, leaseVMs(file)))
	}

	vms, mirror, lent := s.apply(have)
	// The addresses of this node's subnets that claims name for VMs
	// elsewhere are held here first: a claim whose address another lease
	// here holds (a plain pod's, another VM's) is refused, and neither
	// routed by this node nor proxied, nor copied for the plugin.
	filtered := false
	if refused := s.holdLent(lent); len(refused) > 0 {
		vms, mirror, lent = withoutVMs(vms, mirror, lent, refused)
		filtered = true
	}
	// The dataplane first: a moved VM's routes go in at once
	// (routes.Controller.SetVMs), then what the bridge does for a VM
	// that left or came (the NDP proxy, the table of VMs away, the
	// answers to guests that moved in: the home node's pods reach a VM
	// that left at layer 2 until its MAC is in that table). The plugin's
	// copy of the claims comes last: it is written with two fsyncs, which
	// a live migration's home node waited for before.
	s.ctrl.SetVMs(vms)
	if s.passTime != nil && !start.IsZero() {
		s.passTime.Observe(time.Since(start).Seconds())
	}
	if afterRoutes != nil {
		afterRoutes()
	}
	s.proxyLent(lent)
	s.awayLent(lent, movedInPorts(file))
	s.answerMovedIn(movedInGuests(file))
	// The plugin's copy has the claims as the API does: a move known
	// ahead of its claim (peers.go) routes the VM, but is not written
	// for the plugin; the pass after its claim's update writes it.
	if afterRoutes == nil && !s.moves.showing() {
		s.writeMirror(mirror, !filtered)
	}
}

// startPeers opens this node's end of the live-migration notices when
// --peer-key-file (peer.DefaultKeyFile unless set) holds a key, and hands the notices it takes to the
// claims passes, calling poke for each. Without the file (the Secret is
// optional) or with a bad one it says so once, and the routes move by the
// claims alone until a later call finds it.
func (s *claimsSync) startPeers(ctx context.Context, notices *prometheus.CounterVec, poke func()) {
	if s.c.PeerKeyFile == "" {
		return
	}
	const without = "no live-migration notices yet: a migrated VM's routes move when its claim's update reaches each node; "
	key, err := peer.ReadKey(s.c.PeerKeyFile)
	if errors.Is(err, os.ErrNotExist) {
		// The Secret is optional: said once, not warned.
		if _, said := s.warned["--peer-key-file"]; !said {
			s.warned["--peer-key-file"] = ""
			s.log.Info(without+"the key file is not there (the Secret vmlane-peer: docs/vm-identity.md); looking again every "+claimsResync.String(), "file", s.c.PeerKeyFile)
		}
		return
	}
	if err != nil {
		s.warnOnce("--peer-key-file", without+err.Error())
		return
	}
	self, ok := s.node(s.c.NodeName)
	if !ok {
		s.warnOnce("--peer-key-file", without+"this node's Node is not in the cache")
		return
	}
	s.notices = notices
	p, err := openPeers(key, uint16(s.c.PeerPort), self, s.ctrl.Nodes, notices, s.log)
	if err != nil {
		s.warnOnce("--peer-key-file", without+err.Error())
		return
	}
	s.peers = p
	p.serve(ctx, func(n peer.Notice, src netip.Addr) error { return s.takeNotice(n, src, poke) })
	s.log.Info("live-migration notices: a migration's target tells the other nodes at once", "port", s.c.PeerPort)
}

// takeNotice is what the node does with a notice its key opened, which
// came from src: if it takes it (noticeFrom, and a VM whose claim the
// node has), the claims passes use it from the next, which poke wakes.
func (s *claimsSync) takeNotice(n peer.Notice, src netip.Addr, poke func()) error {
	now := time.Now()
	if err := noticeFrom(n, src, s.c.NodeName, s.node, now); err != nil {
		return err
	}
	// A move is kept only for a claim the node has (its version may be
	// behind the notice's): the moves are at most one per claim.
	if _, exists, err := s.claims.GetByKey(n.VM); err != nil || !exists {
		return fmt.Errorf("notice of VM %s from node %s: this node has no VMClaim %s", n.VM, n.From, n.VM)
	}
	// One move, and one log line, a version of the claim: notices
	// again of it (the target's, or replayed) change nothing.
	if s.moves.add(n.VM, peerMove{Node: n.From, Pod: n.Pod, RV: n.ResourceVersion, Until: now.Add(peerHold)}) {
		poke()
		s.log.Info("live-migration notice: the VM's routes move ahead of its claim", "vm", n.VM, "node", n.From, "pod", n.Pod, "claim", n.ResourceVersion)
	}
	return nil
}

// leaseVMs names the VMs of f's leases (none for a nil f).
func leaseVMs(f *leases.File) []string {
	var vms []string
	if f != nil {
		for _, l := range f.Leases {
			if l.VMName != "" {
				vms = append(vms, l.VMName)
			}
		}
	}
	return vms
}

// movedInPorts names the bridge ports of the live leases of f whose
// addresses moved in from another node's subnet: their guests' frames to
// their home subnet go up to the node (bridge.SyncAway).
func movedInPorts(f *leases.File) []string {
	if f == nil {
		return nil
	}
	var out []string
	for _, l := range f.Leases {
		if l.Live() && l.Home.IsValid() && l.ContainerID != "" {
			out = append(out, leasePort(l))
		}
	}
	slices.Sort(out)
	return out
}

// movedInGuests are the guests of the live leases of f whose IPv6
// address moved in from another node's subnet (their ports, MACs and home
// subnets), and onBridge the IPv6 addresses of every live lease of f: the
// node answers the guests' neighbour solicitations for their home subnets
// but for these (ndproxy).
func movedInGuests(f *leases.File) (guests []ndproxy.Guest, onBridge []netip.Addr) {
	if f == nil {
		return nil, nil
	}
	for _, l := range f.Leases {
		if !l.Live() || !l.IP6.IsValid() {
			continue
		}
		onBridge = append(onBridge, l.IP6)
		mac, err := net.ParseMAC(l.MAC)
		if l.Home6.IsValid() && l.ContainerID != "" && err == nil && len(mac) == 6 {
			guests = append(guests, ndproxy.Guest{Port: leasePort(l), MAC: mac, Home: l.Home6})
		}
	}
	slices.SortFunc(guests, func(a, b ndproxy.Guest) int { return strings.Compare(a.Port, b.Port) })
	slices.SortFunc(onBridge, netip.Addr.Compare)
	return guests, onBridge
}

// withoutVMs is apply's result without the claims of refused VMs.
func withoutVMs(vms []routes.VM, mirror plugin.ClaimsFile, lent []plugin.NodeClaim, refused map[string]bool) ([]routes.VM, plugin.ClaimsFile, []plugin.NodeClaim) {
	vms = slices.DeleteFunc(slices.Clone(vms), func(v routes.VM) bool { return refused[v.Name] })
	mirror.Claims = slices.DeleteFunc(slices.Clone(mirror.Claims), func(c plugin.NodeClaim) bool { return refused[c.VM] })
	lent = slices.DeleteFunc(slices.Clone(lent), func(c plugin.NodeClaim) bool { return refused[c.VM] })
	return vms, mirror, lent
}

// heard looks for the guests of this node's migrating VMs (see migrating)
// on their pods' ports of the bridge (ports, from vmPorts) and says which
// have run here since the node started waiting for them
// (announcements.heard). It hands their MACs to watchFrames.
func (s *claimsSync) heard(want map[string]claimStatus, have []claim, ports map[string]string) map[string]bool {
	mig, pods := map[string]string{}, map[string]string{}
	for _, c := range have {
		if w, ok := want[c.VM]; ok && migrating(w, c.Status, s.c.NodeName, s.nodeUp) {
			mig[c.VM] = w.MAC // the lease's, normalized by the store
			pods[c.VM] = w.Pod
		}
	}
	s.awaited.set(mig)
	var last map[string]time.Time
	if len(mig) > 0 {
		frames, err := s.frames.LastFrames(s.c.Bridge)
		if err != nil {
			s.log.Warn("reading the bridge's forwarding database: a live migration's routes move when the source's pod goes", "bridge", s.c.Bridge, "err", err)
		}
		last = framesOnPorts(frames, mig, ports)
	}
	heard, flapping := s.ann.heard(mig, pods, last, time.Now())
	for _, vm := range flapping {
		s.warnOnce(vm, fmt.Sprintf("VM %s: its guest is heard on this node's bridge again in the same pod, within %v of this node taking its claim and losing it: are two guests with MAC %s running at once? The claim stays where it is for now", vm, retakeAfter, mig[vm]))
	}
	return heard
}

// vmPorts names, for each VM attached here, its attachment's host veth: the
// bridge port its lease records, or (anti-spoofing off) the one the plugin
// names after the attachment.
func vmPorts(f *leases.File) map[string]string {
	out := map[string]string{}
	if f == nil {
		return out
	}
	for _, l := range f.Leases {
		if l.VMName == "" || l.ContainerID == "" {
			continue
		}
		out[l.VMName] = leasePort(l)
	}
	return out
}

// leasePort is an attached lease's port of the bridge: the one it
// records, or (anti-spoofing off) the one the plugin names after the
// attachment.
func leasePort(l leases.Lease) string {
	if l.BridgePort != "" {
		return l.BridgePort
	}
	return plugin.HostVethName(l.Key())
}

// apply sorts the claims into what the node uses: the VMs the route
// controller routes, the plugin's copy, and (on a node with a lease store)
// the claims of VMs running elsewhere whose addresses are of this node's
// subnet. A claim that does not check out, or names what an older claim
// names (clashes), is said once and left out.
//
// have must be what list returned last: a pass that finds the claims (and
// the pod network) as the one before gets that one's result again.
func (s *claimsSync) apply(have []claim) ([]routes.VM, plugin.ClaimsFile, []plugin.NodeClaim) {
	cluster := s.c.ClusterCIDRs
	if len(cluster) == 0 {
		cluster = s.ctrl.PodCIDRs()
	}
	gen := s.nodesGen()
	now := time.Now()
	if s.now != nil {
		now = s.now()
	}
	a := &s.applied
	sameNet := a.ok && slices.Equal(a.cluster, cluster) && a.nodesGen == gen
	if sameNet && !s.staleAll && len(s.stale) == 0 && (a.expires.IsZero() || now.Before(a.expires)) {
		return a.vms, a.mirror, a.lent
	}
	switch {
	case !sameNet || s.staleAll:
		s.checks, s.clash, s.net = nil, nil, nil // every claim again
	default:
		for vm := range s.stale {
			delete(s.checks, vm)
			if s.clash != nil {
				s.clash.remove(vm)
			}
		}
	}
	s.stale, s.staleAll = nil, false
	vms, mirror, lent := s.check(have, cluster, now)
	s.applied.ok, s.applied.cluster, s.applied.nodesGen = true, cluster, gen
	s.applied.vms, s.applied.mirror, s.applied.lent = vms, mirror, lent
	s.applied.mirrorJSON = nil
	return vms, mirror, lent
}

// claimCheck is check's verdict on one claim: what it parsed, or what
// makes it unusable; for a usable one, what it gives the plugin's copy
// (nc, encoded in json by writeMirror), the route controller (vm) and
// whether this node lends it an address (lent).
type claimCheck struct {
	u    usable
	err  error
	nc   plugin.NodeClaim
	vm   routes.VM
	lent bool
	json []byte
}

// check is apply's work. A claim that s.checks has a verdict on, as it is
// now, is not checked again, but for its hold time; s.clash, which refuses
// claims that name an older claim's address or MAC, follows the verdicts.
func (s *claimsSync) check(have []claim, cluster []netip.Prefix, now time.Time) ([]routes.VM, plugin.ClaimsFile, []plugin.NodeClaim) {
	nodes := map[string]nodeState{}
	nodeOf := func(name string) nodeState {
		st, seen := nodes[name]
		if !seen {
			n, exists := s.node(name)
			st = nodeState{exists: exists, podCIDRs: n.PodCIDRs}
			nodes[name] = st
		}
		return st
	}
	if s.checks == nil || s.clash == nil {
		s.checks, s.clash = make(map[string]*claimCheck, len(have)), newClashIndex()
	}
	s.applied.expires = time.Time{}
	ok := make([]*claimCheck, 0, len(have))
	for _, c := range have {
		e := s.checks[c.VM]
		switch {
		case e == nil || e.u.claim != c:
			if s.net == nil {
				set := newPrefixSet(cluster)
				s.net = &set
			}
			e = &claimCheck{}
			e.u, e.err = checkClaim(c, *s.net)
			if e.err == nil {
				e.err = checkClaimNodes(e.u, nodeOf, now)
			}
			if e.err == nil {
				s.usable(e)
			}
			s.checks[c.VM] = e
			s.clashFollows(e)
		case e.err == nil && c.Status.HeldUntil != "":
			// Its hold time may have passed since.
			if err := checkClaimNodes(e.u, nodeOf, now); err != nil {
				e = &claimCheck{u: e.u, err: err}
				s.checks[c.VM] = e
				s.clashFollows(e)
			}
		}
		if e.err != nil {
			s.warnOnce(c.VM, e.err.Error())
			continue
		}
		if c.Status.HeldUntil != "" {
			if until, err := time.Parse(time.RFC3339, c.Status.HeldUntil); err == nil && (s.applied.expires.IsZero() || until.Before(s.applied.expires)) {
				s.applied.expires = until
			}
		}
		ok = append(ok, e)
	}
	refused := s.clash.refused()
	mirror := plugin.ClaimsFile{Version: 1, Claims: make([]plugin.NodeClaim, 0, len(ok))}
	vms := make([]routes.VM, 0, len(ok))
	var lent []plugin.NodeClaim
	for _, e := range ok {
		vm := e.u.VM
		if why, bad := refused[vm]; bad {
			s.warnOnce(vm, why)
			continue
		}
		if _, warned := s.warned[vm]; warned {
			delete(s.warned, vm)
		}
		mirror.Claims = append(mirror.Claims, e.nc)
		vms = append(vms, e.vm)
		if e.lent {
			lent = append(lent, e.nc)
		}
	}
	return vms, mirror, lent
}

// usable fills in what e's usable claim gives the plugin's copy, the route
// controller and the node's lending.
func (s *claimsSync) usable(e *claimCheck) {
	c, v4, v6 := e.u.claim, e.u.v4, e.u.v6
	e.nc = plugin.NodeClaim{VM: c.VM, IPv4: v4, IPv6: v6, MAC: c.Status.MAC, Node: c.Status.Node, Pod: c.Status.Pod,
		Live: c.Status.Pod != "" && c.Status.Node != s.c.NodeName && s.nodeUp(c.Status.Node)}
	e.vm = routes.VM{Name: c.VM, Node: c.Status.Node, Addrs: []netip.Addr{v4.Addr()}}
	if v6.IsValid() {
		e.vm.Addrs = append(e.vm.Addrs, v6.Addr())
	}
	e.lent = s.store != nil && c.Status.Node != s.c.NodeName && s.store.Subnet().Contains(v4.Addr())
}

// clashFollows puts e's claim in s.clash, or takes it out when it is not
// usable.
func (s *claimsSync) clashFollows(e *claimCheck) {
	if e.err != nil {
		s.clash.remove(e.u.VM)
		return
	}
	s.clash.add(e.u)
}

// nodeUp reports whether a node is in the cluster and Ready, from the route
// controller's cache: a claim naming a node that is not gives way to the
// VM's pod elsewhere (its pod is gone with its node, or soon will be).
func (s *claimsSync) nodeUp(name string) bool {
	n, ok := s.node(name)
	return ok && n.Ready
}

// node is the Node called name as the route controller's cache has it,
// with its addresses as the controller reads them (the
// --node-ip-annotation address first): where its notices come from.
func (s *claimsSync) node(name string) (routes.Node, bool) {
	if s.nodes != nil {
		return s.nodes.Node(name)
	}
	n, err := s.ctrl.Node(name)
	if err != nil {
		return routes.Node{}, false
	}
	return routes.FromNode(n, s.c.NodeIPAnnotation), true
}

// nodesGen changes when a Node changes in a way node reports.
func (s *claimsSync) nodesGen() uint64 {
	if s.nodes != nil {
		return s.nodes.NodesGeneration()
	}
	return s.ctrl.NodesGeneration()
}

// claimChanges collects the keys (NAMESPACE/NAME, the claim's VM) of the
// VMClaims the informer added, updated or deleted, for list to take.
type claimChanges struct {
	mu   sync.Mutex
	keys map[string]bool
}

// note records obj's key; the informer's handlers call it, after the
// informer's cache has the change.
func (c *claimChanges) note(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keys == nil {
		c.keys = map[string]bool{}
	}
	c.keys[key] = true
}

// take returns the keys noted since the last take, sorted, and forgets
// them.
func (c *claimChanges) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := slices.Sorted(maps.Keys(c.keys))
	c.keys = nil
	return keys
}

// bulkChanges is how many changed claims list takes one at a time at the
// least (more, and more than an eighth of the claims, and it reads them
// all).
const bulkChanges = 256

// list is every VMClaim in the informer's cache, sorted by VM. With the
// informer's changes (s.changes) it reads only the claims that changed
// since the last list and puts each in its place in the last list: a
// claim's move costs a look-up and a binary search, not a read and a sort
// of 10,000 claims. The first list, every list without changes to go by,
// and a burst of changes read the cache whole (listAll). The list is
// changed in place by the next: it is valid until then.
func (s *claimsSync) list() []claim {
	if s.changes == nil || s.listed == nil {
		if s.changes != nil {
			s.changes.take() // listAll reads them all
		}
		return s.listAll()
	}
	keys := s.changes.take()
	if len(keys) > bulkChanges && len(keys) > len(s.listed)/8 {
		// Inserting each into the sorted list costs a copy of it: a burst
		// (claims restored, a namespace deleted) is read whole.
		s.listed = nil
		return s.listAll()
	}
	for _, key := range keys {
		if s.stale == nil {
			s.stale = map[string]bool{}
		}
		s.stale[key] = true
		i, found := claimAt(s.listed, key)
		obj, exists, err := s.claims.GetByKey(key)
		u, ok := obj.(*unstructured.Unstructured)
		switch {
		case err != nil:
			s.listed = nil // read it all next time
			return s.listAll()
		case exists && ok && found:
			s.listed[i] = claimFromObject(u)
		case exists && ok:
			s.listed = slices.Insert(s.listed, i, claimFromObject(u))
		case found:
			s.listed = slices.Delete(s.listed, i, i+1)
		}
	}
	return s.listed
}

// listAll is list from the whole cache. Objects in the cache are never
// changed in place (an update stores a new one), so a claim is read once
// per object (parsed keeps it), and a pass that finds the same objects as
// the last gets the last list again.
func (s *claimsSync) listAll() []claim {
	objs := s.claims.List()
	same := s.listed != nil && len(objs) == len(s.parsed)
	for _, o := range objs {
		if !same {
			break
		}
		u, _ := o.(*unstructured.Unstructured)
		_, same = s.parsed[u]
	}
	if same {
		return s.listed
	}
	s.staleAll = true
	out := make([]claim, 0, len(objs))
	parsed := make(map[*unstructured.Unstructured]claim, len(objs))
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		c, ok := s.parsed[u]
		if !ok {
			c = claimFromObject(u)
		}
		parsed[u] = c
		out = append(out, c)
	}
	s.parsed = parsed
	if s.changes != nil {
		s.parsed = nil // the next lists go by the changes
	}
	slices.SortFunc(out, func(a, b claim) int { return strings.Compare(a.VM, b.VM) })
	s.listed = out
	return out
}

// slimClaim is the VMClaim informer's transform: the object's name,
// namespace, resourceVersion and creationTimestamp, and its status.
func slimClaim(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil // a tombstone: its object was slimmed when stored
	}
	slim := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{}}}
	slim.SetAPIVersion(u.GetAPIVersion())
	slim.SetKind(u.GetKind())
	slim.SetNamespace(u.GetNamespace())
	slim.SetName(u.GetName())
	slim.SetResourceVersion(u.GetResourceVersion())
	slim.SetCreationTimestamp(u.GetCreationTimestamp())
	if st, ok := u.Object["status"]; ok {
		slim.Object["status"] = st
	}
	return slim, nil
}

// claimFromObject reads a VMClaim object's status. A member of the wrong
// type reads as empty, which checkClaim then refuses.
func claimFromObject(u *unstructured.Unstructured) claim {
	c := claim{VM: u.GetNamespace() + "/" + u.GetName(), ResourceVersion: u.GetResourceVersion(), Created: u.GetCreationTimestamp().Time}
	st, _ := u.Object["status"].(map[string]any)
	str := func(k string) string { v, _ := st[k].(string); return v }
	c.Status = claimStatus{IPv4: str("ipv4"), IPv6: str("ipv6"), MAC: str("mac"), Node: str("node"), Pod: str("pod"), HeldUntil: str("heldUntil"), Home: str("home")}
	return c
}

func (s *claimsSync) warnOnce(vm, msg string) {
	if s.warned[vm] == msg {
		return
	}
	s.warned[vm] = msg
	s.log.Warn(msg)
}

// writeMirror writes the plugin's copy of the claims, f, when it changed.
// f is apply's last mirror (applied), encoded once per change of it, or
// that mirror less the claims this pass refused, encoded each time: a
// refusal that lifts (the lease in the way goes) must not leave the
// refused claim out of the copy until the claims change. Each claim is
// encoded once per change of it (kept with check's verdict on it).
func (s *claimsSync) writeMirror(f plugin.ClaimsFile, applied bool) {
	data := s.applied.mirrorJSON
	if data == nil || !applied {
		var err error
		if data, err = s.encodeMirror(f); err != nil {
			return
		}
		if applied {
			s.applied.mirrorJSON = data
		}
	}
	if bytes.Equal(data, s.mirror) {
		return
	}
	path := filepath.Join(filepath.Dir(s.c.LeaseFile), plugin.ClaimsFileName)
	if err := atomicfile.WriteFile(path, append(slices.Clip(data), '\n'), 0o644); err != nil {
		s.log.Warn("writing the node's copy of the VM claims", "file", path, "err", err)
		return
	}
	s.mirror = data
}

// encodeMirror is json.Marshal(f), but each claim's encoding is the one
// kept with check's verdict on it, when it has one for that claim as f
// has it.
func (s *claimsSync) encodeMirror(f plugin.ClaimsFile) ([]byte, error) {
	head, err := json.Marshal(plugin.ClaimsFile{Version: f.Version, Claims: []plugin.NodeClaim{}})
	if err != nil {
		return nil, err
	}
	// head is {"version":1,"claims":[]}: the claims go between the brackets.
	buf := bytes.NewBuffer(make([]byte, 0, len(head)+len(f.Claims)*160))
	buf.Write(head[:len(head)-2])
	for i, nc := range f.Claims {
		if i > 0 {
			buf.WriteByte(',')
		}
		e := s.checks[nc.VM]
		if e != nil && e.nc == nc && e.json != nil {
			buf.Write(e.json)
			continue
		}
		b, err := json.Marshal(nc)
		if err != nil {
			return nil, err
		}
		if e != nil && e.nc == nc {
			e.json = b
		}
		buf.Write(b)
	}
	buf.Write(head[len(head)-2:])
	return buf.Bytes(), nil
}

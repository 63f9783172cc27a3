package routes

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Routes while the list streams in.
//
// At start the informer gets every Node as one event of a watch stream
// (client-go's WatchList, the apiserver's streaming list), but its store,
// and so the controller, sees them only once the last one has arrived: at
// 5,000 Nodes, about 150 ms in which the kernel could have been installing
// routes. The controller therefore taps that stream (tapInitialEvents) and
// installs the pod subnet routes of the Nodes seen so far while the rest
// arrive (earlyRoutes). It only adds: it deletes nothing, replaces no
// route of another owner and no route of its own that already has the
// wanted next hop, and gives up a route the kernel refuses (an off-link
// next hop) without asking why. The first reconcile after the informer
// has synced then finds most routes in place, and does everything else:
// deletes, tunnels, the fabric, Services, VM routes, iptables, Events.
//
// A Node whose podCIDR overlaps one seen later has its route installed
// until that reconcile removes it, a few hundred milliseconds at most, in
// a cluster whose node IPAM is already broken.

// nodeInformer is the Node informer client-go's factory would make, with
// Slim as its transform, but whose initial event streams are tapped for
// early (tapInitialEvents): the factory's informer has no such seam. A
// client without streaming lists (client-go's fake) lists instead, and the
// tap never sees a Node.
func nodeInformer(client kubernetes.Interface, ipAnnotation string, early *earlyRoutes) cache.SharedIndexInformer {
	nodes := client.CoreV1().Nodes()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return nodes.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			w, err := nodes.Watch(ctx, opts)
			if err != nil || opts.SendInitialEvents == nil || !*opts.SendInitialEvents {
				return w, err
			}
			return tapInitialEvents(w, func(n *corev1.Node) { early.add(FromNode(n, ipAnnotation)) }, early.close), nil
		},
	}
	inf := cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, client), &corev1.Node{},
		cache.SharedIndexInformerOptions{Indexers: cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}})
	if err := inf.SetTransform(Slim(ipAnnotation)); err != nil {
		panic(err) // only once started
	}
	return inf
}

// tapInitialEvents returns w with every Node of its initial events (those
// before the bookmark that ends them) passed to seen first, and end called
// at that bookmark. seen and end run on the goroutine that forwards the
// events, before the event is forwarded, so they see each object before
// the informer's transform does.
func tapInitialEvents(w watch.Interface, seen func(*corev1.Node), end func()) watch.Interface {
	t := &streamTap{inner: w, out: make(chan watch.Event), stop: make(chan struct{})}
	go t.run(seen, end)
	return t
}

type streamTap struct {
	inner watch.Interface
	out   chan watch.Event
	stop  chan struct{}
	once  sync.Once
}

func (t *streamTap) run(seen func(*corev1.Node), end func()) {
	defer close(t.out)
	initial := true
	for ev := range t.inner.ResultChan() {
		if initial {
			switch ev.Type {
			case watch.Added:
				if n, ok := ev.Object.(*corev1.Node); ok {
					seen(n)
				}
			case watch.Bookmark:
				if m, err := meta.Accessor(ev.Object); err == nil && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
					initial = false
					end()
				}
			}
		}
		select {
		case t.out <- ev:
		case <-t.stop:
			return
		}
	}
}

func (t *streamTap) ResultChan() <-chan watch.Event { return t.out }

func (t *streamTap) Stop() {
	t.once.Do(func() {
		close(t.stop)
		t.inner.Stop()
	})
}

// earlyBatch is how many routes earlyRoutes hands the table at a time
// (one sendmsg of the kernel table's pipeline).
const earlyBatch = 256

// earlyRoutes installs routes from the Nodes a tapped stream delivers, in
// batches, until it is stopped: whatever arrived while one batch went to
// the kernel is the next batch.
type earlyRoutes struct {
	mu       sync.Mutex
	pending  []Node
	closed   bool
	streamed int           // Nodes queued, over every stream tapped
	wake     chan struct{} // 1-buffered: a Node is pending
}

func newEarlyRoutes() *earlyRoutes { return &earlyRoutes{wake: make(chan struct{}, 1)} }

// add queues n. It never blocks: the stream it is called from is the
// informer's.
func (e *earlyRoutes) add(n Node) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	e.pending = append(e.pending, n)
	e.streamed++
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// close stops queueing: the stream ended, or the informer has synced.
// What is queued still goes to the kernel until run is stopped.
func (e *earlyRoutes) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
}

func (e *earlyRoutes) take() []Node {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.pending
	e.pending = nil
	return p
}

// earlyResult is what an early phase did.
type earlyResult struct {
	Streamed  int           // Nodes the tapped streams delivered
	Nodes     int           // of those, Nodes whose routes were computed
	Installed int           // routes the kernel took
	Refused   int           // routes it refused, left to the reconcile
	First     time.Duration // from the start of run to the first route installed
}

// run installs routes with protocol proto into t, for the Nodes queued
// under p (its Self and VMNodesOnly; nothing else of it applies), until
// ctx ends. It stops between two kernel requests of earlyBatch routes, so
// that it is done with t soon after ctx ends and the caller can hand t to
// the reconcile loop.
func (e *earlyRoutes) run(ctx context.Context, t routeTable, proto int, p Policy, log *slog.Logger) earlyResult {
	in := &earlyInstall{t: t, proto: proto, policy: Policy{Self: p.Self, VMNodesOnly: p.VMNodesOnly},
		start: time.Now(), index: map[string]int{}, tried: map[netip.Prefix]bool{}}
	for {
		select {
		case <-ctx.Done():
			in.res.Nodes = len(in.nodes)
			e.mu.Lock()
			in.res.Streamed = e.streamed
			e.mu.Unlock()
			return in.res
		case <-e.wake:
		}
		if err := in.step(ctx, e.take()); err != nil {
			log.Debug("no routes while the Node list streams in", "err", err)
			<-ctx.Done() // the reconcile will say
		}
	}
}

// earlyInstall is the state of one early phase.
type earlyInstall struct {
	t      routeTable
	proto  int
	policy Policy
	start  time.Time

	owned, foreign map[netip.Prefix]KernelRoute // the table at the first step
	index          map[string]int               // Node name → index in nodes
	nodes          []Node
	tried          map[netip.Prefix]bool // routes given to the table (or found there)
	res            earlyResult
}

// step adds batch to the Nodes seen and installs the routes they add.
func (in *earlyInstall) step(ctx context.Context, batch []Node) error {
	for _, n := range batch {
		if i, ok := in.index[n.Name]; ok {
			in.nodes[i] = n // the stream was restarted
			continue
		}
		in.index[n.Name] = len(in.nodes)
		in.nodes = append(in.nodes, n)
	}
	if in.owned == nil {
		actual, err := in.t.List()
		if err != nil {
			return err
		}
		in.owned, in.foreign, _ = byOwner(actual, in.proto)
	}
	var add []Route
	for _, r := range Compute(in.nodes, in.policy).Routes {
		if in.tried[r.Dst] {
			continue
		}
		in.tried[r.Dst] = true
		if _, ok := in.foreign[r.Dst]; ok {
			continue
		}
		if have, ok := in.owned[r.Dst]; ok && have.Via == r.Via {
			continue
		}
		add = append(add, r)
	}
	for len(add) > 0 && ctx.Err() == nil {
		n := min(len(add), earlyBatch)
		for _, err := range replaceAll(in.t, add[:n], in.proto) {
			if err != nil {
				in.res.Refused++
				continue
			}
			if in.res.Installed == 0 {
				in.res.First = time.Since(in.start)
			}
			in.res.Installed++
		}
		add = add[n:]
	}
	return nil
}

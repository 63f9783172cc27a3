package routes

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

func TestTapInitialEvents(t *testing.T) {
	inner := watch.NewFake()
	var seen []string
	ended := 0
	w := tapInitialEvents(inner, func(n *corev1.Node) { seen = append(seen, n.Name) }, func() { ended++ })
	node := func(name string) *corev1.Node { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }
	end := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	go func() {
		inner.Add(node("a"))
		inner.Action(watch.Bookmark, &corev1.Node{}) // a progress bookmark, not the end
		inner.Add(node("b"))
		inner.Action(watch.Bookmark, end)
		inner.Add(node("c")) // created after the list: the informer's, not the tap's
		inner.Modify(node("a"))
	}()
	var got []watch.EventType
	for ev := range w.ResultChan() {
		got = append(got, ev.Type)
		if len(got) == 6 {
			break
		}
	}
	want := []watch.EventType{watch.Added, watch.Bookmark, watch.Added, watch.Bookmark, watch.Added, watch.Modified}
	if !slices.Equal(got, want) {
		t.Errorf("forwarded %v, want %v", got, want)
	}
	// Every event was forwarded after the tap saw it.
	if !slices.Equal(seen, []string{"a", "b"}) || ended != 1 {
		t.Errorf("tap saw %v and %d ends, want [a b] and 1", seen, ended)
	}
	w.Stop()
	w.Stop() // twice is fine
	if _, open := <-w.ResultChan(); open {
		t.Error("result channel open after Stop")
	}
	if !inner.IsStopped() {
		t.Error("inner watch not stopped")
	}
}

// TestTapStopWhileBlocked stops a tap whose reader has gone: its goroutine
// must not stay blocked forwarding an event.
func TestTapStopWhileBlocked(t *testing.T) {
	inner := watch.NewFakeWithChanSize(4, false)
	w := tapInitialEvents(inner, func(*corev1.Node) {}, func() {})
	inner.Add(&corev1.Node{})
	inner.Add(&corev1.Node{})
	time.Sleep(10 * time.Millisecond)
	w.Stop()
	select {
	case <-drained(w.ResultChan()):
	case <-time.After(5 * time.Second):
		t.Fatal("tap did not end after Stop")
	}
}

func drained(ch <-chan watch.Event) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for range ch {
		}
		close(done)
	}()
	return done
}

func earlyNode(name, cidr, ip string) Node {
	return Node{Name: name, PodCIDRs: []netip.Prefix{netip.MustParsePrefix(cidr)}, Addrs: []netip.Addr{netip.MustParseAddr(ip)}}
}

// TestEarlyInstallOnlyAdds: the early phase installs the routes of the
// Nodes seen so far, and touches nothing the reconcile must judge: not the
// node's own subnet, not another owner's route, not an owned route
// already right, not a stale owned route, and a refused route only once.
func TestEarlyInstallOnlyAdds(t *testing.T) {
	f := newFakeTable(
		"10.244.3.0/24 via 192.168.1.9 proto 4",
		"10.244.2.0/24 via 192.168.1.2 proto 77",
		"10.98.0.0/24 via 192.168.1.5 proto 77",
	)
	f.gateways[netip.MustParseAddr("10.0.0.9")] = netip.MustParseAddr("192.168.1.254")
	in := &earlyInstall{t: f, proto: 77, policy: Policy{Self: "a"}, start: time.Now(),
		index: map[string]int{}, tried: map[netip.Prefix]bool{}}
	ctx := context.Background()
	if err := in.step(ctx, []Node{
		earlyNode("a", "10.244.0.0/24", "192.168.1.10"),
		earlyNode("b", "10.244.1.0/24", "192.168.1.1"),
		earlyNode("c", "10.244.2.0/24", "192.168.1.2"),
	}); err != nil {
		t.Fatal(err)
	}
	if err := in.step(ctx, []Node{
		earlyNode("d", "10.244.3.0/24", "192.168.1.3"),
		earlyNode("far", "10.244.4.0/24", "10.0.0.9"),
		earlyNode("b", "10.244.1.0/24", "192.168.1.1"), // seen again: the stream restarted
	}); err != nil {
		t.Fatal(err)
	}
	if err := in.step(ctx, []Node{earlyNode("e", "10.244.5.0/24", "192.168.1.5")}); err != nil {
		t.Fatal(err)
	}
	wantCalls := []string{
		"replace 10.244.1.0/24 via 192.168.1.1 proto 77",
		"replace 10.244.4.0/24 via 10.0.0.9 proto 77",
		"replace 10.244.5.0/24 via 192.168.1.5 proto 77",
	}
	if !slices.Equal(f.calls, wantCalls) {
		t.Errorf("calls:\n%v\nwant:\n%v", f.calls, wantCalls)
	}
	if got := f.String(); got != "10.244.1.0/24 via 192.168.1.1 proto 77\n"+
		"10.244.2.0/24 via 192.168.1.2 proto 77\n"+
		"10.244.3.0/24 via 192.168.1.9 proto 4\n"+
		"10.244.5.0/24 via 192.168.1.5 proto 77\n"+
		"10.98.0.0/24 via 192.168.1.5 proto 77" {
		t.Errorf("table:\n%s", got)
	}
	if in.res.Installed != 2 || in.res.Refused != 1 || len(in.nodes) != 6 {
		t.Errorf("result %+v over %d nodes, want 2 installed, 1 refused, 6 nodes", in.res, len(in.nodes))
	}
}

// TestEarlyInstallStopsWhenTold: once its context ends, the early phase
// sends nothing more to the table, which is the reconcile loop's then.
func TestEarlyInstallStopsWhenTold(t *testing.T) {
	f := newFakeTable()
	in := &earlyInstall{t: f, proto: 77, start: time.Now(), index: map[string]int{}, tried: map[netip.Prefix]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := in.step(ctx, []Node{earlyNode("b", "10.244.1.0/24", "192.168.1.1")}); err != nil {
		t.Fatal(err)
	}
	if len(f.calls) != 0 {
		t.Errorf("calls after the context ended: %v", f.calls)
	}
}

// syncTable is a fakeTable the test may read while a goroutine writes
// it, and that says each Replace on replaced.
type syncTable struct {
	mu       sync.Mutex
	f        *fakeTable
	replaced chan netip.Prefix
}

func (s *syncTable) List() ([]KernelRoute, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f.List()
}

func (s *syncTable) Replace(dst netip.Prefix, via netip.Addr, proto int) error {
	s.mu.Lock()
	err := s.f.Replace(dst, via, proto)
	s.mu.Unlock()
	s.replaced <- dst
	return err
}

func (s *syncTable) Delete(r KernelRoute) error { panic("the early phase deletes nothing") }

func (s *syncTable) Get(ip netip.Addr) (netip.Addr, error) { panic("the early phase asks nothing") }

// TestEarlyRoutesRun is the whole phase: Nodes queued while it runs are
// installed, a close keeps what is queued but takes no more, and run
// returns what it did once its context ends.
func TestEarlyRoutesRun(t *testing.T) {
	s := &syncTable{f: newFakeTable(), replaced: make(chan netip.Prefix, 8)}
	e := newEarlyRoutes()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan earlyResult)
	go func() { done <- e.run(ctx, s, 77, Policy{Self: "a"}, slog.New(slog.DiscardHandler)) }()
	e.add(earlyNode("b", "10.244.1.0/24", "192.168.1.1"))
	e.add(earlyNode("c", "10.244.2.0/24", "192.168.1.2"))
	e.close()
	e.add(earlyNode("d", "10.244.3.0/24", "192.168.1.3")) // after the end
	var got []string
	for len(got) < 2 {
		select {
		case p := <-s.replaced:
			got = append(got, p.String())
		case <-time.After(5 * time.Second):
			t.Fatalf("replaced %v within 5s, want 2 routes", got)
		}
	}
	cancel()
	res := <-done
	slices.Sort(got)
	if !slices.Equal(got, []string{"10.244.1.0/24", "10.244.2.0/24"}) || res.Installed != 2 || res.Nodes != 2 || res.Streamed != 2 {
		t.Errorf("replaced %v, result %+v; want the 2 routes of the 2 Nodes queued before close", got, res)
	}
	select {
	case p := <-s.replaced:
		t.Errorf("%s replaced after run returned", p)
	default:
	}
}

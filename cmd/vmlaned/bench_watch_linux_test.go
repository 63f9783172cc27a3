package main

// What the benchmarks watch: the kernel's route events in a node's netns
// and the apiserver's Node events, each with when it arrived.

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/vmlane/vmlane/internal/netaddr"
	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/routes"
)

// routeWatch follows the proto 77 routes of a netns's main table through
// a route subscription, so waiting costs no dumps that would compete with
// vmlaned for the CPU.
type routeWatch struct {
	want   int
	full   chan struct{} // closed when want routes are first present
	fullAt time.Time     // set before full is closed
	dead   chan struct{} // closed when the subscription ends
	err    error         // why, set before dead is closed

	mu     sync.Mutex
	gw     map[netip.Prefix]netip.Addr // guarded by mu
	waitOn routes.Route                // guarded by mu; Dst invalid: nothing awaited
	waitCh chan time.Time              // guarded by mu
	goneOn netip.Prefix                // guarded by mu; invalid: no deletion awaited
	goneCh chan time.Time              // guarded by mu
}

func watchRoutes(tb testing.TB, n *netnstest.NS, want int) *routeWatch {
	tb.Helper()
	w := &routeWatch{want: want, full: make(chan struct{}), dead: make(chan struct{}), gw: map[netip.Prefix]netip.Addr{}}
	ch := make(chan netlink.RouteUpdate, 4*want)
	done := make(chan struct{})
	tb.Cleanup(func() { close(done) })
	// 5,000 RTM_NEWROUTEs in a burst overflow the default receive buffer;
	// an overflow ends the subscription (w.dead).
	opts := netlink.RouteSubscribeOptions{ReceiveBufferSize: 64 << 20, ReceiveBufferForceSize: true,
		ErrorCallback: func(err error) {
			w.mu.Lock()
			w.err = errors.Join(w.err, err)
			w.mu.Unlock()
		}}
	if err := n.Do(func() error { return netlink.RouteSubscribeWithOptions(ch, done, opts) }); err != nil {
		tb.Fatalf("subscribing to routes in %s: %v", n.Name, err)
	}
	go func() {
		defer close(w.dead)
		for u := range ch {
			now := time.Now()
			if int(u.Protocol) != routes.DefaultProtocol || u.Table != unix.RT_TABLE_MAIN || u.Dst == nil {
				continue
			}
			dst := netaddr.Prefix(u.Dst)
			gw, _ := netip.AddrFromSlice(u.Gw)
			w.mu.Lock()
			switch u.Type {
			case unix.RTM_NEWROUTE:
				w.gw[dst] = gw.Unmap()
				if len(w.gw) == w.want && w.fullAt.IsZero() {
					w.fullAt = now
					close(w.full)
				}
				if w.waitCh != nil && w.waitOn.Dst == dst && w.waitOn.Via == gw.Unmap() {
					w.waitCh <- now
					w.waitCh = nil
				}
			case unix.RTM_DELROUTE:
				delete(w.gw, dst)
				if w.goneCh != nil && w.goneOn == dst {
					w.goneCh <- now
					w.goneCh = nil
				}
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *routeWatch) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.gw)
}

// expect arms the watch for r (one at a time); the channel gets the time
// its RTM_NEWROUTE arrives.
func (w *routeWatch) expect(r routes.Route) <-chan time.Time {
	ch := make(chan time.Time, 1)
	w.mu.Lock()
	w.waitOn, w.waitCh = r, ch
	w.mu.Unlock()
	return ch
}

// expectGone arms the watch for the deletion of the route to dst (one at a
// time); the channel gets the time its RTM_DELROUTE arrives.
func (w *routeWatch) expectGone(dst netip.Prefix) <-chan time.Time {
	ch := make(chan time.Time, 1)
	w.mu.Lock()
	w.goneOn, w.goneCh = dst, ch
	w.mu.Unlock()
	return ch
}

// restoreAfterDelete deletes node i's route by hand and says how soon
// vmlaned puts it back: at once if its delete watch still works, at the
// next resync if its subscription died.
func (w *routeWatch) restoreAfterDelete(tb testing.TB, n *netnstest.NS, i int) string {
	tb.Helper()
	back := w.expect(routes.Route{Dst: benchPodCIDR(i), Via: benchNodeIP(i, 0)})
	t0 := time.Now()
	n.MustRun(tb, "ip", "route", "del", benchPodCIDR(i).String())
	select {
	case t1 := <-back:
		return ms1(t1.Sub(t0))
	case <-time.After(5 * time.Second):
		return "not within 5s (waits for the resync)"
	}
}

// benchRoutes is the route of each node i < n for which vm(i) holds (every
// one, for a nil vm), as its generation-0 address gives it.
func benchRoutes(n int, vm func(i int) bool) map[netip.Prefix]netip.Addr {
	want := map[netip.Prefix]netip.Addr{}
	for i := range n {
		if vm == nil || vm(i) {
			want[benchPodCIDR(i)] = benchNodeIP(i, 0)
		}
	}
	return want
}

// checkInstalled dumps the table once and checks that vmlane's routes are
// want, no more and no fewer.
func checkInstalled(tb testing.TB, n *netnstest.NS, want map[netip.Prefix]netip.Addr) {
	tb.Helper()
	var rs []netlink.Route
	if err := n.Do(func() (err error) {
		rs, err = netlinksafe.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: routes.DefaultProtocol}, netlink.RT_FILTER_PROTOCOL)
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	got := map[netip.Prefix]netip.Addr{}
	for _, r := range rs {
		gw, _ := netip.AddrFromSlice(r.Gw)
		got[netaddr.Prefix(r.Dst)] = gw
	}
	if len(got) != len(want) {
		tb.Fatalf("%d routes with proto %d, want %d", len(got), routes.DefaultProtocol, len(want))
	}
	for dst, via := range want {
		if gw := got[dst]; gw != via {
			tb.Fatalf("route to %s via %v, want via %s", dst, gw, via)
		}
	}
}

// nodeWatch records when a watch on Nodes delivers each resourceVersion.
type nodeWatch struct {
	mu sync.Mutex
	at map[string]time.Time // guarded by mu
}

func watchNodes(tb testing.TB, client kubernetes.Interface) *nodeWatch {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	l, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		tb.Fatal(err)
	}
	wi, err := client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(wi.Stop)
	nw := &nodeWatch{at: map[string]time.Time{}}
	go func() {
		for ev := range wi.ResultChan() {
			now := time.Now()
			if n, ok := ev.Object.(*corev1.Node); ok {
				nw.mu.Lock()
				nw.at[n.ResourceVersion] = now
				nw.mu.Unlock()
			}
		}
	}()
	return nw
}

// when is when resourceVersion rv arrived, waiting up to a second for it.
func (nw *nodeWatch) when(rv string) (time.Time, bool) {
	for deadline := time.Now().Add(time.Second); ; time.Sleep(5 * time.Millisecond) {
		nw.mu.Lock()
		t, ok := nw.at[rv]
		nw.mu.Unlock()
		if ok || time.Now().After(deadline) {
			return t, ok
		}
	}
}

//go:build e2e

package realnode

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/vmlane/vmlane/e2e/cluster"
)

// migrationClock times a live migration's switch in the kernels: when the
// target's bridge first learns the guest's MAC (the kernel's new-neighbour
// notice, what wakes the target's vmlaned), and when each node's kernel
// gets the VM's /32 the way it should go after the switch. It listens
// from before the migration; stop ends it.
type migrationClock struct {
	mu         sync.Mutex
	firstFrame time.Time
	routed     map[string]time.Time // node -> when
	stops      []chan struct{}
}

// startMigrationClock listens on target's bridge for mac, and on each of
// others for a route to addr/32 via the target's address (or, on the
// target, onto a link: its host route), from now on.
func startMigrationClock(t *testing.T, target *cluster.RealNode, targetIP netip.Addr, others []*cluster.RealNode, mac string, addr netip.Addr) *migrationClock {
	t.Helper()
	m := &migrationClock{routed: map[string]time.Time{}}
	open := func(n *cluster.RealNode) netns.NsHandle {
		h, err := netns.GetFromPath(n.NS.Path)
		if err != nil {
			t.Fatalf("%s: %v", n.Name, err)
		}
		t.Cleanup(func() { h.Close() })
		return h
	}
	hw, err := net.ParseMAC(mac)
	if err != nil {
		t.Fatalf("the guest's MAC %q: %v", mac, err)
	}
	th := open(target)
	nch, ndone := make(chan netlink.NeighUpdate, 256), make(chan struct{})
	if err := netlink.NeighSubscribeWithOptions(nch, ndone, netlink.NeighSubscribeOptions{Namespace: &th}); err != nil {
		t.Fatalf("%s: watching the bridge: %v", target.Name, err)
	}
	m.stops = append(m.stops, ndone)
	go func() {
		for u := range nch {
			if u.Type == unix.RTM_NEWNEIGH && u.Family == unix.AF_BRIDGE && u.HardwareAddr.String() == hw.String() {
				now := time.Now()
				m.mu.Lock()
				if m.firstFrame.IsZero() {
					m.firstFrame = now
				}
				m.mu.Unlock()
			}
		}
	}()
	watch := func(n *cluster.RealNode, want func(r netlink.Route) bool) {
		h := open(n)
		ch, done := make(chan netlink.RouteUpdate, 256), make(chan struct{})
		if err := netlink.RouteSubscribeWithOptions(ch, done, netlink.RouteSubscribeOptions{Namespace: &h}); err != nil {
			t.Fatalf("%s: watching routes: %v", n.Name, err)
		}
		m.stops = append(m.stops, done)
		go func() {
			for u := range ch {
				if u.Type != unix.RTM_NEWROUTE || u.Dst == nil || !u.Dst.IP.Equal(addr.AsSlice()) {
					continue
				}
				if ones, _ := u.Dst.Mask.Size(); ones != 32 || !want(u.Route) {
					continue
				}
				now := time.Now()
				m.mu.Lock()
				if _, ok := m.routed[n.Name]; !ok {
					m.routed[n.Name] = now
				}
				m.mu.Unlock()
			}
		}()
	}
	for _, n := range others {
		watch(n, func(r netlink.Route) bool { return r.Gw != nil && r.Gw.Equal(targetIP.AsSlice()) })
	}
	watch(target, func(r netlink.Route) bool { return r.Gw == nil && r.LinkIndex > 0 })
	return m
}

// stop ends the listening; report is the switch's times: from the first
// frame on the target's bridge to each node's route (negative: the route
// came first), and the slowest of those.
func (m *migrationClock) stop() (first time.Time, after map[string]time.Duration, slowest time.Duration, ok bool) {
	for _, d := range m.stops {
		close(d)
	}
	m.stops = nil
	m.mu.Lock()
	defer m.mu.Unlock()
	after = map[string]time.Duration{}
	if m.firstFrame.IsZero() {
		return time.Time{}, after, 0, false
	}
	ok = true
	for n, at := range m.routed {
		d := at.Sub(m.firstFrame)
		after[n] = d
		slowest = max(slowest, d)
	}
	return m.firstFrame, after, slowest, ok
}

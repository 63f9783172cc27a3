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
// first routes the VM's IPv4 address the new way after a change of its
// /32: via the target's address, or on the target onto a link (its host
// route, or at home its pod subnet's once the /32 via the source went). It
// listens from before the migration; stop ends it.
type migrationClock struct {
	mu         sync.Mutex
	firstFrame time.Time
	routed     map[string]time.Time // node -> when
	stops      []chan struct{}
}

// startMigrationClock listens on target's bridge for mac, and on each of
// nodes (the target among them) for the VM's route to addr, from now on.
func startMigrationClock(t *testing.T, target *cluster.RealNode, nodes []*cluster.RealNode, mac string, addr netip.Addr) *migrationClock {
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
	for _, n := range nodes {
		h := open(n)
		nh, err := netlink.NewHandleAt(h)
		if err != nil {
			t.Fatalf("%s: %v", n.Name, err)
		}
		t.Cleanup(nh.Close)
		right := func() bool {
			rs, err := nh.RouteGet(addr.AsSlice())
			if err != nil || len(rs) == 0 {
				return false
			}
			if n == target {
				return rs[0].Gw == nil
			}
			return rs[0].Gw != nil && rs[0].Gw.Equal(target.IP.AsSlice())
		}
		ch, done := make(chan netlink.RouteUpdate, 256), make(chan struct{})
		if err := netlink.RouteSubscribeWithOptions(ch, done, netlink.RouteSubscribeOptions{Namespace: &h}); err != nil {
			t.Fatalf("%s: watching routes: %v", n.Name, err)
		}
		m.stops = append(m.stops, done)
		go func() {
			for u := range ch {
				if u.Dst == nil || !u.Dst.IP.Equal(addr.AsSlice()) {
					continue
				}
				if ones, _ := u.Dst.Mask.Size(); ones != 32 || !right() {
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
	return m
}

// stop ends the listening and reports the switch: when the target's
// bridge first heard the guest, and the slowest node's new route after
// that frame (ok false when the bridge never reported the guest).
func (m *migrationClock) stop() (first time.Time, slowest time.Duration, ok bool) {
	for _, d := range m.stops {
		close(d)
	}
	m.stops = nil
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.firstFrame.IsZero() {
		return time.Time{}, 0, false
	}
	for _, at := range m.routed {
		slowest = max(slowest, at.Sub(m.firstFrame))
	}
	return m.firstFrame, slowest, true
}

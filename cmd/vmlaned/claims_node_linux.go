package main

// What a claims pass does to the node itself: the addresses VMs hold
// elsewhere kept out of use here, the bridge's NDP proxy entries and host
// routes for VMs that moved in, and the bridge's forwarding database,
// read for the last frame of a migrating guest.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/vmlane/vmlane/internal/bridge"
	"github.com/vmlane/vmlane/internal/ndproxy"
	"github.com/vmlane/vmlane/internal/ra"
	"github.com/vmlane/vmlane/leases"
	"github.com/vmlane/vmlane/plugin"
)

// holdLent keeps the addresses of this node's subnets that VMs running
// elsewhere hold out of use here: a held lease each, renewed every pass
// (the store's hold time from now), so a VM that stays away keeps them
// and one whose claim goes gives them back after the hold time.
// It returns the VMs whose addresses or MAC another lease here holds: a
// claim naming a plain pod's address (or another VM's) for a VM elsewhere,
// which no route or proxy of this node may follow.
func (s *claimsSync) holdLent(lent []plugin.NodeClaim) (refused map[string]bool) {
	if len(lent) == 0 {
		return nil
	}
	err := s.store.Update(func(tx *leases.Tx) error {
		refused = nil
		for _, c := range lent {
			var ip6 netip.Addr
			if s.store.Subnet6().Contains(c.IPv6.Addr()) {
				ip6 = c.IPv6.Addr()
			}
			err := tx.HoldFor(c.VM, c.IPv4.Addr(), ip6, c.MAC)
			switch {
			case errors.Is(err, leases.ErrInUse):
				if refused == nil {
					refused = map[string]bool{}
				}
				refused[c.VM] = true
				s.warnOnce(c.VM, fmt.Sprintf("VMClaim %s names, for a VM on %s, what a lease of this node holds: not used, routed or proxied: %v", c.VM, c.Node, err))
			case err != nil:
				s.warnOnce(c.VM, fmt.Sprintf("holding VM %s's addresses of this node's subnet while it runs on %s: %v", c.VM, c.Node, err))
			}
		}
		return nil
	})
	if err != nil {
		s.log.Warn("holding the addresses of VMs running elsewhere", "err", err)
	}
	return refused
}

// proxyLent keeps one NDP proxy entry on the bridge for each IPv6 address of
// this node's subnet6 that a VM running elsewhere holds, and none for any
// other address of subnet6: this node's pods take it for on-link and ask
// for it by neighbour solicitation, and the node answers and routes it.
// (IPv4 needs no entries: proxy ARP answers for every address the node
// routes off the bridge.)
func (s *claimsSync) proxyLent(lent []plugin.NodeClaim) {
	sub6 := s.store.Subnet6()
	if !sub6.IsValid() {
		return
	}
	have, err := s.proxies.List(s.c.Bridge)
	if err != nil {
		s.log.Warn("listing NDP proxy entries", "bridge", s.c.Bridge, "err", err)
		return
	}
	var want []netip.Addr
	for _, c := range lent {
		want = append(want, c.IPv6.Addr())
	}
	add, del := proxyDiff(have, want, sub6)
	for _, a := range del {
		if err := s.proxies.Del(s.c.Bridge, a); err != nil {
			s.log.Warn("removing NDP proxy entry", "addr", a, "err", err)
		}
	}
	for _, a := range add {
		if err := s.proxies.Add(s.c.Bridge, a); err != nil {
			s.log.Warn("adding NDP proxy entry", "addr", a, "err", err)
		}
	}
}

// awayLent sends this node's pods' frames to the MACs of its VMs that run
// elsewhere (lent), and the unicast frames of the guests that moved in
// (ports), up to the node, which routes them (bridge.SyncAway): their
// neighbour entries still name MACs of the VM's home bridge after it
// moved. Written when they change, and again every claimsResync (someone
// may have flushed the table).
func (s *claimsSync) awayLent(lent []plugin.NodeClaim, ports []string) {
	var macs []string
	for _, c := range lent {
		macs = append(macs, c.MAC)
	}
	slices.Sort(macs)
	if !s.awayAt.IsZero() && time.Since(s.awayAt) < claimsResync &&
		slices.Equal(macs, s.awayMACs) && slices.Equal(ports, s.awayPorts) {
		return
	}
	sync := s.away
	if sync == nil {
		sync = bridge.SyncAway
	}
	// This node's own pod subnets: the guests that moved in reach them
	// as the node's pods reach them.
	var local []netip.Prefix
	if s.store != nil {
		local = append(local, s.store.Subnet())
		if s6 := s.store.Subnet6(); s6.IsValid() {
			local = append(local, s6)
		}
	}
	if err := sync(s.c.Bridge, local, macs, ports); err != nil {
		s.log.Warn("the bridge's table of VMs that run elsewhere: this node's pods reach such a VM only once their neighbour entry for it expires", "table", bridge.AwayTable, "err", err)
		return
	}
	s.awayMACs, s.awayPorts, s.awayAt = macs, ports, time.Now()
}

// ndResponder answers the neighbour solicitations of guests that moved in
// (ndproxy.Responder; tests use a fake).
type ndResponder interface {
	Sync(guests []ndproxy.Guest, onBridge []netip.Addr) error
	Close()
}

// answerMovedIn has the node answer the IPv6 neighbour solicitations of the
// guests that moved in (movedInGuests) for the addresses of their home
// subnets: those are on-link for them, and the node is their way home
// (ndproxy). Given when they change, and again every claimsResync, which
// watches anew a port made anew; an error is said once.
func (s *claimsSync) answerMovedIn(guests []ndproxy.Guest, onBridge []netip.Addr) {
	if s.nd == nil {
		if len(guests) == 0 {
			return
		}
		// What the bridge advertises, with the guest's home subnet.
		var advert func(netip.Prefix, net.HardwareAddr) ([]byte, error)
		if rc := s.c.ra6; rc != nil {
			advert = func(home netip.Prefix, mac net.HardwareAddr) ([]byte, error) {
				c := *rc
				c.Prefix = home
				return ra.Build(c, mac, ra.DefaultRouterLifetime)
			}
		}
		s.nd = ndproxy.New(s.c.Bridge, advert, s.log)
	}
	if !s.ndAt.IsZero() && time.Since(s.ndAt) < claimsResync && s.ndErr == "" &&
		slices.EqualFunc(guests, s.ndGuests, ndproxy.Guest.Equal) && slices.Equal(onBridge, s.ndOnBridge) {
		return
	}
	err := s.nd.Sync(guests, onBridge)
	s.ndGuests, s.ndOnBridge, s.ndAt = guests, onBridge, time.Now()
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg != s.ndErr && msg != "" {
		s.log.Warn("answering the neighbour solicitations of VMs that moved in: over IPv6 such a VM loses its home node's pods once its neighbour entries for them expire", "err", err)
	}
	s.ndErr = msg
}

// neighProxies is the bridge's NDP proxy table (`ip -6 neigh … proxy`);
// netlinkProxies is the kernel's, tests use a fake.
type neighProxies interface {
	List(bridge string) ([]netip.Addr, error)
	Add(bridge string, a netip.Addr) error
	Del(bridge string, a netip.Addr) error
}

type netlinkProxies struct{}

func (netlinkProxies) index(bridge string) (int, error) {
	br, err := netlink.LinkByName(bridge)
	if err != nil {
		return 0, err
	}
	return br.Attrs().Index, nil
}

func (p netlinkProxies) List(bridge string) ([]netip.Addr, error) {
	idx, err := p.index(bridge)
	if err != nil {
		return nil, err
	}
	ns, err := netlink.NeighProxyList(idx, netlink.FAMILY_V6)
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, n := range ns {
		if a, ok := netip.AddrFromSlice(n.IP); ok {
			out = append(out, a)
		}
	}
	return out, nil
}

func (p netlinkProxies) neigh(bridge string, a netip.Addr) (*netlink.Neigh, error) {
	idx, err := p.index(bridge)
	if err != nil {
		return nil, err
	}
	return &netlink.Neigh{LinkIndex: idx, Family: netlink.FAMILY_V6, Flags: netlink.NTF_PROXY, IP: a.AsSlice()}, nil
}

func (p netlinkProxies) Add(bridge string, a netip.Addr) error {
	n, err := p.neigh(bridge, a)
	if err != nil {
		return err
	}
	return netlink.NeighSet(n)
}

func (p netlinkProxies) Del(bridge string, a netip.Addr) error {
	n, err := p.neigh(bridge, a)
	if err != nil {
		return err
	}
	return netlink.NeighDel(n)
}

// sweepHostRoutes brings the bridge's host routes in line with the leases
// and the VMs claimed elsewhere (hostRouteDiff).
func (s *claimsSync) sweepHostRoutes(f *leases.File, have []netip.Prefix, elsewhere map[string]bool) {
	add, del := hostRouteDiff(f, have, elsewhere)
	for _, p := range del {
		if err := s.hosts.Del(s.c.Bridge, p); err != nil {
			s.log.Warn("removing a stale host route", "dst", p, "err", err)
			continue
		}
		s.log.Info("removed a host route no lease of a VM that moved in needs", "dst", p)
	}
	for _, p := range add {
		if err := s.hosts.Add(s.c.Bridge, p); err != nil {
			s.log.Warn("adding the host route of a VM that moved in", "dst", p, "err", err)
			continue
		}
		s.log.Info("added the host route of a VM that moved in", "dst", p)
	}
}

// hostRouter is the bridge's host routes (bridge.HostRoutes & co.); tests
// use a fake.
type hostRouter interface {
	List(bridge string) ([]netip.Prefix, error)
	Add(bridge string, dst netip.Prefix) error
	Del(bridge string, dst netip.Prefix) error
}

type bridgeHostRoutes struct{}

func (bridgeHostRoutes) List(br string) ([]netip.Prefix, error) { return bridge.HostRoutes(br) }
func (bridgeHostRoutes) Add(br string, dst netip.Prefix) error  { return bridge.RouteHost(br, dst) }
func (bridgeHostRoutes) Del(br string, dst netip.Prefix) error  { return bridge.UnrouteHost(br, dst) }

// bridgeFrames is a bridge's forwarding database, read for when it last
// had a frame from each MAC it learnt on each port; netlinkFrames is the
// kernel's, tests use a fake.
type bridgeFrames interface {
	LastFrames(bridge string) (map[frameKey]time.Time, error)
}

// clockTick is the unit of the kernel's "ago" times in neighbour and
// forwarding entries (clock_t, USER_HZ = 100).
const clockTick = 10 * time.Millisecond

type netlinkFrames struct{}

// LastFrames reads the bridge's learnt entries (`bridge fdb show br BRIDGE
// dynamic`): their "updated" time is the last frame from the MAC on the
// port.
func (netlinkFrames) LastFrames(bridge string) (map[frameKey]time.Time, error) {
	br, err := netlink.LinkByName(bridge)
	if err != nil {
		return nil, err
	}
	var entries []netlink.Neigh
	for try := 0; ; try++ {
		entries, err = netlink.NeighListExecute(netlink.Ndmsg{Family: unix.AF_BRIDGE})
		if !errors.Is(err, netlink.ErrDumpInterrupted) || try == 2 {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := map[frameKey]time.Time{}
	ports := map[int]string{}
	for _, n := range entries {
		if n.MasterIndex != br.Attrs().Index || n.State&(netlink.NUD_PERMANENT|netlink.NUD_NOARP) != 0 || len(n.HardwareAddr) != 6 {
			continue // another bridge's, or a local or static entry
		}
		port, ok := ports[n.LinkIndex]
		if !ok {
			l, err := netlink.LinkByIndex(n.LinkIndex)
			if err != nil {
				continue // the port went meanwhile
			}
			port = l.Attrs().Name
			ports[n.LinkIndex] = port
		}
		t := now.Add(-time.Duration(n.Updated) * clockTick)
		if k := (frameKey{Port: port, MAC: n.HardwareAddr.String()}); t.After(out[k]) {
			out[k] = t
		}
	}
	return out, nil
}

// awaitedMACs is the set of migrating guests' MACs a claims pass waits to
// hear, shared with watchFrames.
type awaitedMACs struct {
	mu   sync.Mutex
	macs map[string]bool
}

func (a *awaitedMACs) set(vms map[string]string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.macs = map[string]bool{}
	for _, mac := range vms {
		a.macs[mac] = true
	}
}

func (a *awaitedMACs) has(mac string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.macs[mac]
}

func (a *awaitedMACs) empty() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.macs) == 0
}

// watchFrames calls poke when a bridge of the node learns an awaited MAC
// (the kernel says so when a MAC is new to a bridge or comes from another
// port): a migrated guest's first frames on this node, its gratuitous ARP
// and unsolicited neighbour advertisements, wake a claims pass at once.
// It subscribes again after a failure; the pass's poll covers the gap.
func watchFrames(ctx context.Context, awaited *awaitedMACs, poke func(), log *slog.Logger) {
	for ctx.Err() == nil {
		ch := make(chan netlink.NeighUpdate, 64)
		done := make(chan struct{})
		err := netlink.NeighSubscribeWithOptions(ch, done, netlink.NeighSubscribeOptions{
			ErrorCallback: func(err error) { log.Debug("watching the bridge's forwarding database", "err", err) },
		})
		if err != nil {
			log.Warn("watching the bridge's forwarding database: live migrations are noticed by polling", "err", err)
		} else {
		updates:
			for {
				select {
				case <-ctx.Done():
					break updates
				case u, ok := <-ch:
					if !ok {
						break updates
					}
					if u.Type == unix.RTM_NEWNEIGH && u.Family == unix.AF_BRIDGE && awaited.has(u.HardwareAddr.String()) {
						poke()
					}
				}
			}
		}
		close(done)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// applyClaim makes one call of the plan; update and delete only if the
// claim is still as it was read.
//
// A created or updated claim is owned by this node's Node (owner, when
// known: a claim names its writer's node, see planClaims), so that
// Kubernetes' garbage collector deletes the claims of a node that is
// removed, whose vmlaned no longer deletes them.
func applyClaim(ctx context.Context, api dynamic.NamespaceableResourceInterface, a claimAction, owner types.UID) error {
	ns, name := splitVM(a.VM)
	if a.Op == "delete" {
		return api.Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &a.ResourceVersion}})
	}
	var status map[string]any
	b, _ := json.Marshal(a.Status)
	if err := json.Unmarshal(b, &status); err != nil {
		return err
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": vmClaimGVR.GroupVersion().String(),
		"kind":       "VMClaim",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"status":     status,
	}}
	if owner != "" {
		obj.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: a.Status.Node, UID: owner}})
	}
	if a.Op == "create" {
		_, err := api.Namespace(ns).Create(ctx, obj, metav1.CreateOptions{})
		return err
	}
	obj.SetResourceVersion(a.ResourceVersion)
	_, err := api.Namespace(ns).Update(ctx, obj, metav1.UpdateOptions{})
	return err
}

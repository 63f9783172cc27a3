package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmlane/vmlane/dhcp"
	"github.com/vmlane/vmlane/internal/ra"
	"github.com/vmlane/vmlane/leases"
)

// lockBridge takes an exclusive flock on a run file beside the lease file,
// named for the bridge, so a second vmlaned on the same bridge refuses to
// start instead of both binding port 67 (the DHCP socket sets SO_REUSEPORT,
// so the kernel would not stop it). The lock lasts until Close: the file
// behind it is also held in heldLocks, because an unreachable *os.File is
// closed by its finalizer, which would drop the lock at the next GC if a
// caller let go of the handle.
func lockBridge(leaseFile, bridge string) (*bridgeLock, error) {
	dir := filepath.Dir(leaseFile)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "vmlaned-"+bridge+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		pid, _ := os.ReadFile(path)
		f.Close()
		return nil, fmt.Errorf("another vmlaned (pid %s) already serves bridge %s (lock %s)", strings.TrimSpace(string(pid)), bridge, path)
	}
	// The pid is for the message of the vmlaned that is refused; the
	// lock holds without it.
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	heldMu.Lock()
	heldLocks[path] = f
	heldMu.Unlock()
	return &bridgeLock{path: path}, nil
}

// heldLocks keeps every bridge lock's file reachable until its Close.
var (
	heldMu    sync.Mutex
	heldLocks = map[string]*os.File{}
)

// bridgeLock is a lock lockBridge took.
type bridgeLock struct{ path string }

// Close releases the lock.
func (l *bridgeLock) Close() error {
	heldMu.Lock()
	f := heldLocks[l.path]
	delete(heldLocks, l.path)
	heldMu.Unlock()
	if f == nil {
		return nil
	}
	return f.Close()
}

// dhcpMetrics are the DHCP server's Prometheus metrics.
type dhcpMetrics struct {
	requests, replies, drops, naks *prometheus.CounterVec
	latency                        *prometheus.HistogramVec
	leases                         *prometheus.GaugeVec
}

func newDHCPMetrics(reg prometheus.Registerer) *dhcpMetrics {
	m := &dhcpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vmlane_dhcp_requests_total", Help: "DHCP requests by message type."}, []string{"type"}),
		replies:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vmlane_dhcp_replies_total", Help: "DHCP replies by message type."}, []string{"type"}),
		drops:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vmlane_dhcp_dropped_total", Help: "DHCP packets answered with nothing, by reason."}, []string{"reason"}),
		naks:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vmlane_dhcp_naks_total", Help: "DHCPNAKs by reason."}, []string{"reason"}),
		latency:  prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "vmlane_dhcp_handle_duration_seconds", Help: "Time to handle a request, lease store writes included.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}, []string{"type"}),
		leases:   prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vmlane_leases", Help: "Leases in the lease file by state."}, []string{"state"}),
	}
	reg.MustRegister(m.requests, m.replies, m.drops, m.naks, m.latency, m.leases)
	return m
}

func (m *dhcpMetrics) hooks() dhcp.Hooks {
	return dhcp.Hooks{
		Request: func(t dhcpv4.MessageType) { m.requests.WithLabelValues(t.String()).Inc() },
		Reply:   func(t dhcpv4.MessageType) { m.replies.WithLabelValues(t.String()).Inc() },
		Drop:    func(r string) { m.drops.WithLabelValues(r).Inc() },
		NAK:     func(r string) { m.naks.WithLabelValues(r).Inc() },
		Latency: func(t dhcpv4.MessageType, d time.Duration) {
			m.latency.WithLabelValues(t.String()).Observe(d.Seconds())
		},
	}
}

// startDHCP runs the DHCP server on the bridge for subnet, and a sweep that
// applies lease expiry and refreshes the lease gauges. CNI reservations'
// binds are written just after their ACKs, batched (dhcp.LateBindDelay);
// flush writes what is pending and must run before the process exits. The dhcp package
// adds its own component attribute to log; dlog is for this file's lines.
func startDHCP(ctx context.Context, c *config, subnet netip.Prefix, mtu int, reg prometheus.Registerer, log *slog.Logger) (flush func(), err error) {
	dlog := log.With("component", "dhcp")
	gw := subnet.Addr().Next()
	opts := []leases.Option{leases.WithNode(c.NodeName), leases.WithVMHold(c.VMHoldTime)}
	if s6 := c.PodCIDR6; s6.IsValid() {
		opts = append(opts, leases.WithSubnet6(s6, s6.Addr().Next()))
	}
	store, err := leases.Open(c.LeaseFile, subnet, gw, opts...)
	if err != nil {
		return nil, fmt.Errorf("lease store: %w", err)
	}
	cfg := dhcp.Config{
		ServerIP: gw, Subnet: subnet, Router: gw, Domain: c.Domain, Search: c.Search,
		MTU: mtu, LeaseTime: c.LeaseTime, DynamicRange: c.DHCPRange,
	}
	var dns6 []netip.Addr
	for _, s := range c.DNS {
		a := netip.MustParseAddr(s) // checked in parseFlags
		if a.Is4() {
			cfg.DNS = append(cfg.DNS, a)
		} else {
			dns6 = append(dns6, a)
		}
	}
	m := newDHCPMetrics(reg)
	alloc := dhcp.NewStoreAllocator(store)
	if err := alloc.Watch(ctx); err != nil {
		// Still correct without it: every lookup checks the file.
		dlog.Warn("no change notification on the lease folder; checking the file on every lookup", "err", err)
	}
	alloc = alloc.Defer(ctx, log)
	h, err := dhcp.NewHandler(cfg, alloc, dhcp.WithLogger(log), dhcp.WithHooks(m.hooks()))
	if err != nil {
		return nil, fmt.Errorf("DHCP server config: %w", err)
	}
	// Bound before this returns: a bind error stops vmlaned here, and
	// readiness then means the server answers.
	srv, err := dhcp.Listen(c.Bridge, h)
	if err != nil {
		return nil, fmt.Errorf("DHCP server on %s: %w", c.Bridge, err)
	}
	go func() {
		if err := srv.Serve(ctx, log); err != nil && ctx.Err() == nil {
			dlog.Error("DHCP server stopped", "err", err)
		}
	}()
	if c.PodCIDR6.IsValid() {
		if err := startDHCPv6(ctx, c, alloc, dns6, mtu, reg, log); err != nil {
			return nil, err
		}
	}
	if c.AntiSpoof {
		if err := backfillBridgePorts(store, c.Bridge, log.With("component", "antispoof")); err != nil {
			dlog.Warn("naming the bridge ports of leases from before anti-spoofing", "err", err)
		}
	}
	go sweepLeases(ctx, store, min(30*time.Second, c.LeaseTime/4), m, dlog)
	go remarkHeld(ctx, store, c.Bridge, gw, c.LeaseTime, dlog)
	dlog.Info("DHCP server up", "bridge", c.Bridge, "server", gw, "range", c.DHCPRangeText)
	return alloc.Flush, nil
}

// startDHCPv6 runs, for a dual-stack node, the DHCPv6 server and the
// router advertisements on the bridge: the RA makes the bridge the guests'
// default router and sends them to DHCPv6 (M flag, prefix on-link with no
// SLAAC), DHCPv6 hands each VM the ip6 its lease holds. The server's
// sockets are open before this returns.
func startDHCPv6(ctx context.Context, c *config, alloc dhcp.StoreAllocator, dns6 []netip.Addr, mtu int, reg prometheus.Registerer, log *slog.Logger) error {
	s6 := c.PodCIDR6
	br, err := net.InterfaceByName(c.Bridge)
	if err != nil {
		return fmt.Errorf("DHCPv6 server: %w", err)
	}
	h, err := dhcp.NewHandler6(dhcp.Config6{
		Subnet6: s6, ServerMAC: br.HardwareAddr, DNS: dns6, Search: c.Search, LeaseTime: c.LeaseTime,
	}, alloc, log)
	if err != nil {
		return fmt.Errorf("DHCPv6 server config: %w", err)
	}
	h.Hooks = newDHCPv6Metrics(reg).hooks()
	srv, err := dhcp.Listen6(c.Bridge, h)
	if err != nil {
		return fmt.Errorf("DHCPv6 server on %s: %w", c.Bridge, err)
	}
	go func() {
		if err := srv.Serve(ctx, log); err != nil && ctx.Err() == nil {
			log.Error("DHCPv6 server stopped", "component", "dhcpv6", "err", err)
		}
	}()
	rc := ra.Config{Iface: c.Bridge, Prefix: s6, DNS: dns6, Search: c.Search}
	if mtu >= 1280 {
		rc.MTU = mtu
	}
	c.ra6 = &rc
	go func() {
		if err := ra.Run(ctx, rc, log); err != nil {
			log.Error("router advertisements stopped", "component", "ra", "err", err)
		}
	}()
	log.Info("DHCPv6 server and router advertisements up", "component", "dhcpv6", "bridge", c.Bridge, "subnet6", s6)
	return nil
}

// dhcpv6Metrics are the DHCPv6 server's Prometheus metrics.
type dhcpv6Metrics struct {
	requests, replies, drops *prometheus.CounterVec
}

func newDHCPv6Metrics(reg prometheus.Registerer) *dhcpv6Metrics {
	m := &dhcpv6Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vmlane_dhcpv6_requests_total", Help: "DHCPv6 requests by message type."}, []string{"type"}),
		replies:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vmlane_dhcpv6_replies_total", Help: "DHCPv6 replies by message type."}, []string{"type"}),
		drops:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vmlane_dhcpv6_dropped_total", Help: "DHCPv6 messages answered with nothing, by reason."}, []string{"reason"}),
	}
	reg.MustRegister(m.requests, m.replies, m.drops)
	return m
}

func (m *dhcpv6Metrics) hooks() dhcp.Hooks6 {
	return dhcp.Hooks6{
		Request: func(t string) { m.requests.WithLabelValues(t).Inc() },
		Reply:   func(t string) { m.replies.WithLabelValues(t).Inc() },
		Drop:    func(r string) { m.drops.WithLabelValues(r).Inc() },
	}
}

// stateUnknown is vmlane_leases' label for every state this version does
// not know (a newer vmlane's): label values read from a file must stay few
// and fixed.
const stateUnknown = "unknown"

// leaseCounts counts leases by vmlane_leases' state label, every label
// present.
func leaseCounts(ls []leases.Lease) map[string]int {
	counts := map[string]int{string(leases.StateReserved): 0, string(leases.StateBound): 0, string(leases.StateDeclined): 0, string(leases.StateHeld): 0, stateUnknown: 0}
	for _, l := range ls {
		if l.State.Known() {
			counts[string(l.State)]++
		} else {
			counts[stateUnknown]++
		}
	}
	return counts
}

// sweepLeases applies expiry now and then: a dynamic lease whose client
// went away frees its address, a lapsed binding of a CNI reservation goes
// back to reserved, a VM's held lease past its hold time frees the VM's
// addresses.
func sweepLeases(ctx context.Context, store *leases.Store, every time.Duration, m *dhcpMetrics, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if changed, err := store.Expire(); err != nil {
			log.Error("expiring leases", "err", err)
		} else if len(changed) > 0 {
			log.Info("leases expired", "count", len(changed))
		}
		if all, err := store.List(); err == nil {
			for s, n := range leaseCounts(all) {
				m.leases.WithLabelValues(s).Set(float64(n))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// remarkHeld marks bound the VM reservations whose guests answer ARP for
// their address with their MAC (dhcp.Holders): binds that a crash or a
// SIGKILL lost between an ACK and its late write. A runtime in
// leases.Wait for such a VM then returns now, not at the guest's next
// renewal. The expiry is a full lease from now, which is no earlier than
// the lost ACK's.
func remarkHeld(ctx context.Context, store *leases.Store, bridge string, gw netip.Addr, leaseTime time.Duration, log *slog.Logger) {
	ls, err := store.List()
	if err != nil {
		log.Error("listing leases to re-mark held ones", "err", err)
		return
	}
	want := map[netip.Addr]net.HardwareAddr{}
	byIP := map[netip.Addr]leases.Lease{}
	for _, l := range ls {
		if l.Source != leases.SourceCNI || !l.VM || l.State != leases.StateReserved {
			continue
		}
		if mac, err := net.ParseMAC(l.MAC); err == nil {
			want[l.IP], byIP[l.IP] = mac, l
		}
	}
	held, err := dhcp.Holders(ctx, bridge, gw, want, 3*time.Second)
	if err != nil {
		log.Warn("asking by ARP which VMs hold their reserved address", "err", err)
	}
	for ip := range held {
		l := byIP[ip]
		if _, err := store.Bind(l.MAC, ip, time.Now().Add(leaseTime), l.Hostname); err != nil {
			log.Warn("re-marking a held reservation bound", "ip", ip, "mac", l.MAC, "err", err)
			continue
		}
		log.Info("VM holds its reserved address: marked bound again (its bind was lost in a restart)", "ip", ip, "mac", l.MAC, "pod", l.Pod.Namespace+"/"+l.Pod.Name)
	}
}

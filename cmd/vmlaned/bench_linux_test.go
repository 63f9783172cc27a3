package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/routes"
)

// The benchmark's cluster: benchNodes other Nodes with podCIDR
// 10.(128+i/256).(i%256).0/24 (a /9 of /24s) and InternalIP in 10.99.0.0/16,
// on-link from node a's eth0 (10.99.0.11/16). The apiserver keeps the
// integration test's 10.99.0.1/24: the switch is a plain bridge, so a /24
// and a /16 on it reach each other as long as each address is inside the
// other's prefix, and node addresses outside 10.99.0.0/24 need reach only
// node a's table.
const (
	benchNodes   = 5000
	benchWorkers = 16
	benchSamples = 200
	benchSelfIP  = "10.99.0.11"
	benchFloorIP = "10.99.0.12"
	// benchClusterCIDR covers every podCIDR, node a's (index benchNodes)
	// included: vmlaned's --cluster-cidr under VMLANE_BENCH_CLUSTER_CIDR=1.
	benchClusterCIDR = "10.128.0.0/9"
	// benchSampleTimeout bounds one event-to-route sample, and
	// benchSteadyBudget the whole steady-state phase: a controller that
	// misses the goal by orders of magnitude still finishes the run.
	benchSampleTimeout = 30 * time.Second
	benchSteadyBudget  = 3 * time.Minute
)

func benchPodCIDR(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(128 + i/256), byte(i % 256), 0}), 24)
}

// benchNodeIP is node i's address in generation gen (0 or 1): the steady
// state moves a node between the two. Never in 10.99.0.0/24.
func benchNodeIP(i, gen int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 99, byte(1 + 100*gen + i/250), byte(1 + i%250)})
}

// BenchmarkRouteController5000 is the route controller at 5,000 Nodes in a
// real apiserver, against its goals: from vmlaned's start (the informer's
// list included) to the last route within 1.2× `ip -batch` of the same
// route replaces, the sync after the list within 1.5× a bare netlink
// RouteReplace loop, event-to-route p99 under 100 ms, vmlaned RSS under
// 100 MiB. It measures once whatever b.N is, so
// run it with -benchtime 1x (a larger N skips):
//
//	VMLANE_CONTROLPLANE_DIR=... go test -run '^$' -bench RouteController5000 -benchtime 1x -timeout 20m ./cmd/vmlaned
//
// vmlaned runs with its defaults but --resync-period 30s, so the NAT
// exemption is rendered from every node's podCIDRs (aggregated).
// VMLANE_BENCH_CLUSTER_CIDR=1 gives it --cluster-cidr instead, for
// comparison. The steady state stops at benchSteadyBudget, so a controller
// that misses the goal by orders of magnitude still finishes the run.
func BenchmarkRouteController5000(b *testing.B) {
	if b.N > 1 {
		b.Skip("measures once per run; use -benchtime 1x")
	}
	began, load0 := time.Now(), loadAvg()
	c := newCluster(b)
	a := c.host("a", benchSelfIP+"/16")

	clusterCIDR := os.Getenv("VMLANE_BENCH_CLUSTER_CIDR") == "1"
	t0 := time.Now()
	nodes, kept := c.createNodes(nil)
	create := time.Since(t0)
	b.Logf("created %d Nodes in %v (status.addresses kept by Create: %v)", len(nodes), create.Round(time.Millisecond), kept)
	listJSON, listProto := c.listCost(""), c.listCost("application/vnd.kubernetes.protobuf")

	fl := measureFloor(b, c.host("floor", benchFloorIP+"/16"), clusterCIDR)
	b.Logf("netlink floor: %+v", fl)

	w := watchRoutes(b, a, benchNodes)
	var extra []string
	if clusterCIDR {
		extra = []string{"--cluster-cidr", benchClusterCIDR}
	}
	d := c.startBenchDaemon(a, extra...)
	synced := d.log.wait(b, d, "node informer synced", 3*time.Minute)
	setUp := d.log.wait(b, d, "node set up", time.Second)
	waitRoutes(b, d, w)
	r := benchResult{create: create, listJSON: listJSON, listProto: listProto, floor: fl, clusterCIDR: clusterCIDR, load0: load0}
	r.setUp, r.synced = setUp.Sub(d.start), synced.Sub(setUp)
	r.early = d.log.attr("node informer synced", "routesWhileListing") + ", the first " +
		d.log.attr("node informer synced", "firstRoute") + " after the controller started"
	r.fullSync, r.startToRoutes = w.fullAt.Sub(synced), w.fullAt.Sub(d.start)
	r.cpuSync = procCPU(b, d.pid())
	r.rssSync, _ = procMem(b, d.pid())
	checkInstalled(b, a, benchRoutes(len(nodes), nil))
	b.Logf("full sync %v after 'node informer synced', %v after start", r.fullSync.Round(time.Millisecond), r.startToRoutes.Round(time.Millisecond))

	r.drops = netlinkDrops(b, a, d.pid())
	r.restore = w.restoreAfterDelete(b, a, 0)
	time.Sleep(2 * time.Second) // the reconciles the sync itself caused
	r.m0 = scrape(b, a)

	r.lat, r.watched, r.timeouts = steadyState(b, c.client, w, nodes)
	r.rss, r.hwm = procMem(b, d.pid())
	r.m1 = scrape(b, a)
	r.cpuEnd = procCPU(b, d.pid())
	r.total = time.Since(began)

	ms := func(v time.Duration) float64 { return float64(v.Microseconds()) / 1000 }
	b.ReportMetric(0, "ns/op") // the whole run's time, meaningless here
	b.ReportMetric(ms(r.fullSync), "fullsync-ms")
	b.ReportMetric(ms(fl.replace), "floor-ms")
	b.ReportMetric(r.ratio(), "sync/floor")
	b.ReportMetric(ms(fl.ipBatch), "ipbatch-ms")
	b.ReportMetric(ms(r.startToRoutes), "start-to-routes-ms")
	b.ReportMetric(r.startRatio(), "start/ipbatch")
	b.ReportMetric(ms(percentile(r.lat, 50)), "event-p50-ms")
	b.ReportMetric(ms(percentile(r.lat, 99)), "event-p99-ms")
	b.ReportMetric(r.rss, "rss-MiB")
	b.ReportMetric(r.hwm, "rss-hwm-MiB")
	b.ReportMetric(create.Seconds(), "create-s")
	fmt.Print(r.table())
}

// benchResult is what one run measured.
type benchResult struct {
	create, listJSON, listProto time.Duration
	floor                       floor
	setUp, synced               time.Duration // start -> "node set up" -> "node informer synced"
	early                       string        // routes installed while the list streamed in
	fullSync, startToRoutes     time.Duration
	cpuSync, cpuEnd             cpuTimes
	rssSync, rss, hwm           float64 // MiB
	drops, restore              string
	m0, m1                      map[string]float64 // vmlaned's metrics before and after the steady state
	lat, watched                []time.Duration
	timeouts                    int
	clusterCIDR                 bool
	load0                       string
	total                       time.Duration
}

func (r benchResult) ratio() float64 { return float64(r.fullSync) / float64(r.floor.replace) }

// startRatio is vmlaned's whole sync, from its start (the informer's list
// included) to the last route, against `ip -batch` of the same routes.
func (r benchResult) startRatio() float64 {
	return float64(r.startToRoutes) / float64(r.floor.ipBatch)
}

// table prints the results for people: metric, value, goal, met or not.
func (r benchResult) table() string {
	g := newGoalTable()
	row := g.row
	delta := func(name string) float64 { return r.m1[name] - r.m0[name] }
	reconciles := delta("vmlane_desired_compute_duration_seconds_count")
	compute := time.Duration(delta("vmlane_desired_compute_duration_seconds_sum") / max(reconciles, 1) * float64(time.Second))
	p99 := percentile(r.lat, 99)

	row("metric", "value", "goal")
	row(fmt.Sprintf("create %d Nodes (%d workers, client 500 QPS, burst 1000)", benchNodes, benchWorkers), dur(r.create), "")
	row("netlink floor: RouteReplace loop", dur(r.floor.replace), "")
	row("  same, one netlink socket (Handle)", dur(r.floor.handle), "")
	row("  RouteGet+RouteReplace loop (Reconcile's calls)", dur(r.floor.getReplace), "")
	row("  routes.Reconcile in-process, empty table", dur(r.floor.reconcile), "")
	row("start -> 'node set up'", dur(r.setUp), "")
	row("'node set up' -> 'node informer synced'", dur(r.synced), "")
	row("  routes installed while the Nodes streamed in", r.early, "")
	row("  list 5,001 Nodes in this process: JSON / protobuf", ms1(r.listJSON)+" / "+ms1(r.listProto), "")
	row("full sync: informer synced -> 5,000 routes", dur(r.fullSync), "")
	row("  sync/floor", fmt.Sprintf("%.2f", r.ratio()), "<= 1.5", r.ratio() <= 1.5)
	row("  vmlaned CPU start -> routes (user+sys)", fmt.Sprintf("%v+%v", r.cpuSync.user, r.cpuSync.sys), "")
	row("  vmlaned GCs, MiB allocated: start -> routes+2s", fmt.Sprintf("%.0f, %.0f", r.m0["go_gc_duration_seconds_count"], r.m0["go_memstats_alloc_bytes_total"]/(1<<20)), "")
	row("start -> 5,000 routes", dur(r.startToRoutes), "")
	row("  ip -batch of the same 5,000 route replaces", dur(r.floor.ipBatch), "")
	row("  start/ip-batch (informer list included)", fmt.Sprintf("%.2f", r.startRatio()), "<= 1.2", r.startRatio() <= 1.2)
	row("  'node informer synced' -> routes / ip-batch", fmt.Sprintf("%.2f", float64(r.fullSync)/float64(r.floor.ipBatch)), "")
	row(fmt.Sprintf("event -> route p50 (%d samples, %d timed out)", len(r.lat), r.timeouts), ms1(percentile(r.lat, 50)), "")
	row("event -> route p99", ms1(p99), "< 100ms", p99 < 100*time.Millisecond && r.timeouts == 0)
	row("  of which update -> watch event p50 / p99", ms1(percentile(r.watched, 50))+" / "+ms1(percentile(r.watched, 99)), "")
	row("  reconciles in steady state, mean desired compute", fmt.Sprintf("%.0f, %s", reconciles, ms1(compute)), "")
	row("  vmlaned CPU in steady state (user+sys)", fmt.Sprintf("%v+%v", r.cpuEnd.user-r.cpuSync.user, r.cpuEnd.sys-r.cpuSync.sys), "")
	row("  vmlaned GCs, MiB allocated in steady state", fmt.Sprintf("%.0f, %.0f", delta("go_gc_duration_seconds_count"), delta("go_memstats_alloc_bytes_total")/(1<<20)), "")
	row("  per reconcile: list 5,000 routes / check chains", ms1(r.floor.list)+" / "+ms1(r.floor.iptCheck), "")
	row("  vmlane_reconcile_duration_seconds observations", fmt.Sprint(r.m1["vmlane_reconcile_duration_seconds_count"]), "")
	row("vmlaned VmRSS after sync / after steady state", fmt.Sprintf("%.1f / %.1f MiB", r.rssSync, r.rss), "")
	row("vmlaned VmHWM (peak RSS)", fmt.Sprintf("%.1f MiB", r.hwm), "< 100 MiB", r.hwm < 100)
	row("  Go heap in use / sys, goroutines", fmt.Sprintf("%.1f / %.1f MiB, %.0f", r.m1["go_memstats_heap_inuse_bytes"]/(1<<20), r.m1["go_memstats_sys_bytes"]/(1<<20), r.m1["go_goroutines"]), "")
	row("vmlaned route-event socket drops after sync", r.drops, "0", r.drops == "0")
	row("route deleted by hand -> restored", r.restore, "")
	row("vmlaned NAT exemption from", natRules(r.clusterCIDR), "")
	row("whole benchmark; 1-min load average at start / end", r.total.Round(time.Second).String()+"; "+r.load0+" / "+loadAvg(), "")
	return g.String()
}

func natRules(clusterCIDR bool) string {
	if clusterCIDR {
		return "--cluster-cidr " + benchClusterCIDR
	}
	return "every node's podCIDRs, aggregated"
}

// createNodes creates node a and benchNodes others with benchWorkers
// concurrent clients, and returns the others as created (index i is node
// i); vm(i), where vm is not nil, labels node i a VM node. kept reports
// whether Create kept status.addresses; where it did not, each Node got an
// UpdateStatus too.
func (c *cluster) createNodes(vm func(i int) bool) (nodes []*corev1.Node, kept bool) {
	c.tb.Helper()
	ctx := context.Background()
	create := func(name string, i int, ip netip.Addr) (*corev1.Node, bool, error) {
		p := benchPodCIDR(i).String()
		addrs := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip.String()}}
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.NodeSpec{PodCIDR: p, PodCIDRs: []string{p}}, Status: corev1.NodeStatus{Addresses: addrs}}
		if vm != nil && i < benchNodes && vm(i) {
			n.Labels = map[string]string{routes.VMNodeLabel: "true"}
		}
		n, err := c.client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if err != nil || len(n.Status.Addresses) > 0 {
			return n, true, err
		}
		n.Status.Addresses = addrs
		n, err = c.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return n, false, err
	}
	if _, _, err := create("a", benchNodes, netip.MustParseAddr(benchSelfIP)); err != nil {
		c.tb.Fatal(err)
	}
	nodes = make([]*corev1.Node, benchNodes)
	lost := make([]bool, benchNodes)
	err := inParallel(benchNodes, func(i int) (err error) {
		var k bool
		nodes[i], k, err = create(fmt.Sprintf("n%04d", i), i, benchNodeIP(i, 0))
		lost[i] = !k
		return err
	})
	if err != nil {
		c.tb.Fatalf("creating Nodes: %v", err)
	}
	return nodes, !slices.Contains(lost, true)
}

// inParallel calls f(i) for each i < n from benchWorkers goroutines (a
// benchmark's API objects are made as concurrent clients make them) and
// joins the errors.
func inParallel(n int, f func(i int) error) error {
	errs := make([]error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range benchWorkers {
		wg.Go(func() {
			for i := range next {
				errs[i] = f(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

// listCost is the median of 3 lists of every Node in content type ct (""
// is client-go's default, JSON): what the daemon's informer does at start.
func (c *cluster) listCost(ct string) time.Duration {
	c.tb.Helper()
	cfg := rest.CopyConfig(c.cfg)
	cfg.ContentType = ct
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		c.tb.Fatal(err)
	}
	var ds []time.Duration
	for range 3 {
		t0 := time.Now()
		l, err := client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		if err != nil || len(l.Items) != benchNodes+1 {
			c.tb.Fatalf("listing Nodes (%q): %d, %v", ct, len(l.Items), err)
		}
		ds = append(ds, time.Since(t0))
	}
	return percentile(ds, 50)
}

// floor is the bare kernel cost of what a full sync does.
type floor struct {
	replace    time.Duration // netlink.RouteReplace ×benchNodes (a socket each)
	handle     time.Duration // the same on one netlink.Handle
	getReplace time.Duration // RouteGet of the gateway, then RouteReplace
	reconcile  time.Duration // routes.Reconcile in this process, empty table
	// ipBatch is `ip -batch` of the same route replaces, the process
	// included: what an operator's script would take.
	ipBatch time.Duration
	// What every reconcile does besides installing routes, median of 5:
	// dump the table (benchNodes routes), check the iptables chains.
	list     time.Duration
	iptCheck time.Duration
}

// measureFloor times benchNodes route replaces in n, which has the same
// eth0 /16 as node a, from a thread inside it, flushing between runs; then
// the per-reconcile costs of listing that table and of checking vmlaned's
// chains.
func measureFloor(tb testing.TB, n *netnstest.NS, clusterCIDR bool) floor {
	tb.Helper()
	route := func(i int) *netlink.Route {
		return &netlink.Route{Dst: ipNet(benchPodCIDR(i)), Gw: benchNodeIP(i, 0).AsSlice(),
			Protocol: routes.DefaultProtocol, Table: unix.RT_TABLE_MAIN}
	}
	// Each loop runs 3 times from an empty table; the median counts (the
	// apiserver and the test's own garbage share the two cores).
	run := func(name string, loop func() error) time.Duration {
		var ds []time.Duration
		for range 3 {
			n.MustRun(tb, "ip", "route", "flush", "proto", strconv.Itoa(routes.DefaultProtocol))
			if err := n.Do(func() error {
				t0 := time.Now()
				err := loop()
				ds = append(ds, time.Since(t0))
				return err
			}); err != nil {
				tb.Fatalf("floor %s: %v", name, err)
			}
			if got := strings.Count(n.MustRun(tb, "ip", "-4", "route", "show", "proto", strconv.Itoa(routes.DefaultProtocol)), "\n"); got != benchNodes {
				tb.Fatalf("floor %s: %d routes, want %d", name, got, benchNodes)
			}
		}
		return percentile(ds, 50)
	}
	var f floor
	f.replace = run("RouteReplace", func() error {
		for i := range benchNodes {
			if err := netlink.RouteReplace(route(i)); err != nil {
				return err
			}
		}
		return nil
	})
	f.handle = run("Handle.RouteReplace", func() error {
		h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return err
		}
		defer h.Close()
		for i := range benchNodes {
			if err := h.RouteReplace(route(i)); err != nil {
				return err
			}
		}
		return nil
	})
	f.getReplace = run("RouteGet+RouteReplace", func() error {
		for i := range benchNodes {
			if _, err := netlink.RouteGet(benchNodeIP(i, 0).AsSlice()); err != nil {
				return err
			}
			if err := netlink.RouteReplace(route(i)); err != nil {
				return err
			}
		}
		return nil
	})
	batch := filepath.Join(tb.TempDir(), "routes.batch")
	var lines strings.Builder
	for i := range benchNodes {
		fmt.Fprintf(&lines, "route replace %s via %s proto %d\n", benchPodCIDR(i), benchNodeIP(i, 0), routes.DefaultProtocol)
	}
	if err := os.WriteFile(batch, []byte(lines.String()), 0o644); err != nil {
		tb.Fatal(err)
	}
	f.ipBatch = run("ip -batch", func() error {
		// The child inherits this thread's namespace.
		out, err := exec.Command("ip", "-batch", batch).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip -batch: %w: %s", err, out)
		}
		return nil
	})
	want := make([]routes.Route, benchNodes)
	for i := range want {
		want[i] = routes.Route{Dst: benchPodCIDR(i), Via: benchNodeIP(i, 0), Node: fmt.Sprintf("n%04d", i)}
	}
	f.reconcile = run("routes.Reconcile", func() error {
		out, err := routes.Reconcile(routes.NewKernelTable(), want, routes.DefaultProtocol)
		if err == nil && len(out.Installed) != benchNodes {
			err = fmt.Errorf("installed %d routes, want %d", len(out.Installed), benchNodes)
		}
		return err
	})
	median := func(fn func() error) (time.Duration, error) {
		var ds []time.Duration
		err := n.Do(func() error {
			for range 5 {
				t0 := time.Now()
				if err := fn(); err != nil {
					return err
				}
				ds = append(ds, time.Since(t0))
			}
			return nil
		})
		return percentile(ds, 50), err
	}
	var err error
	if f.list, err = median(func() error { _, err := routes.NewKernelTable().List(); return err }); err != nil {
		tb.Fatalf("listing routes: %v", err)
	}
	// The chains vmlaned renders for node a (Controller.desired).
	cluster := []netip.Prefix{netip.MustParsePrefix(benchClusterCIDR)}
	if !clusterCIDR {
		cluster = nil
		for i := range benchNodes + 1 {
			cluster = append(cluster, benchPodCIDR(i))
		}
		cluster = routes.Aggregate(cluster)
	}
	chains := routes.Chains(routes.NATOptions{PodCIDR: benchPodCIDR(benchNodes), Cluster: cluster, Masquerade: true})
	var ipt routes.IPTables
	if err := n.Do(func() (err error) {
		if ipt, err = routes.NewIPTables(false); err != nil {
			return err
		}
		_, err = routes.EnsureChains(ipt, chains) // builds them
		return err
	}); err != nil {
		tb.Fatalf("iptables: %v", err)
	}
	if f.iptCheck, err = median(func() error {
		changed, err := routes.EnsureChains(ipt, chains)
		if changed {
			err = errors.Join(err, errors.New("intact chains rebuilt"))
		}
		return err
	}); err != nil {
		tb.Fatalf("checking chains: %v", err)
	}
	return f
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// steadyState moves benchSamples nodes, one after another, to their other
// address and times each from just before UpdateStatus to the
// RTM_NEWROUTE with the new gateway. A pause of 0–99 ms between samples
// keeps them from falling in step with the reconciles they cause.
//
// watched is the part of each sample until the apiserver's watch delivered
// the update to a watcher in this process: what no controller can beat.
func steadyState(tb testing.TB, client kubernetes.Interface, w *routeWatch, nodes []*corev1.Node) (lat, watched []time.Duration, timeouts int) {
	tb.Helper()
	ctx := context.Background()
	nw := watchNodes(tb, client)
	deadline := time.Now().Add(benchSteadyBudget)
	for k := range benchSamples {
		if time.Now().After(deadline) {
			tb.Logf("steady state: budget of %v spent after %d samples", benchSteadyBudget, k)
			break
		}
		i := (k*benchNodes/benchSamples + k%7) % benchNodes // spread over the /9
		n := nodes[i].DeepCopy()
		ip := benchNodeIP(i, 1)
		if n.Status.Addresses[0].Address == ip.String() {
			ip = benchNodeIP(i, 0)
		}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip.String()}}
		arrived := w.expect(routes.Route{Dst: benchPodCIDR(i), Via: ip})
		t0 := time.Now()
		updated, err := client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			tb.Fatalf("node %s changed behind the benchmark: %v", n.Name, err)
		}
		if err != nil {
			tb.Fatal(err)
		}
		nodes[i] = updated
		select {
		case t1 := <-arrived:
			lat = append(lat, t1.Sub(t0))
			if t, ok := nw.when(updated.ResourceVersion); ok {
				watched = append(watched, t.Sub(t0))
			}
		case <-w.dead:
			tb.Fatalf("route watch ended: %v", w.err)
		case <-time.After(benchSampleTimeout):
			lat = append(lat, benchSampleTimeout)
			timeouts++
		}
		time.Sleep(time.Duration(k*37%100) * time.Millisecond)
	}
	return lat, watched, timeouts
}

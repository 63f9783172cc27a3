package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/vmlane/vmlane/routes"
)

// The routes-only benchmark's cluster is BenchmarkRouteController5000's,
// with every 100th Node (1%) labelled a VM node.
const (
	benchLabelChanges = 50
	benchChurn        = 200
)

func isBenchVM(i int) bool { return i%100 == 0 }

// BenchmarkRoutesOnly5000 is vmlaned --routes-only, as it runs on each node
// of another CNI in a hybrid cluster, at 5,000 Nodes of which 50 are VM
// nodes, in a real apiserver:
//   - from its start (the informer's list of all 5,001 Nodes included) to
//     the 50 routes, with its CPU and RSS then;
//   - route convergence after a label change, p50 and p99 over 50 changes
//     each way: a Node labelled vmlane.io/vm-node=true routed, the label
//     removed and the route withdrawn, each timed from just before the
//     patch to the kernel's route event; against the reference measured
//     in the same run, the apiserver's watch delivering the same patch to
//     a watcher in this process (what no controller can beat), and
//     against the full-mode goal of 100 ms;
//   - its CPU through 200 address changes of Nodes that are not VM nodes
//     (churn it must ignore), and its peak RSS against full mode's goal,
//     100 MiB.
//
// It measures once whatever b.N is, so run it with -benchtime 1x (a
// larger N skips):
//
//	VMLANE_CONTROLPLANE_DIR=... go test -run '^$' -bench RoutesOnly5000 -benchtime 1x -timeout 20m ./cmd/vmlaned
func BenchmarkRoutesOnly5000(b *testing.B) {
	if b.N > 1 {
		b.Skip("measures once per run; use -benchtime 1x")
	}
	began, load0 := time.Now(), loadAvg()
	c := newCluster(b)
	a := c.host("a", benchSelfIP+"/16")
	t0 := time.Now()
	nodes, _ := c.createNodes(isBenchVM)
	create := time.Since(t0)
	want := benchRoutes(len(nodes), isBenchVM)
	b.Logf("created %d Nodes, %d of them VM nodes, in %v", len(nodes), len(want), create.Round(time.Millisecond))

	w := watchRoutes(b, a, len(want))
	d := c.startBenchDaemon(a, "--routes-only")
	synced := d.log.wait(b, d, "node informer synced", 3*time.Minute)
	waitRoutes(b, d, w)
	r := routesOnlyResult{vmNodes: len(want), load0: load0}
	r.startToRoutes, r.syncToRoutes = w.fullAt.Sub(d.start), w.fullAt.Sub(synced)
	r.cpuSync = procCPU(b, d.pid())
	r.rssSync, _ = procMem(b, d.pid())
	time.Sleep(2 * time.Second) // the reconciles the sync itself caused
	checkInstalled(b, a, want)
	r.m0 = scrape(b, a)

	r.labelled, r.unlabelled, r.watched, r.timeouts = labelChanges(b, c.client, w, nodes)
	checkInstalled(b, a, want) // every label taken off again
	r.cpuLabels = procCPU(b, d.pid())
	r.m1 = scrape(b, a)

	r.churn = churn(b, c.client, nodes)
	time.Sleep(2 * time.Second) // the reconciles the last updates caused
	checkInstalled(b, a, want)  // and none of them routed
	r.cpuEnd = procCPU(b, d.pid())
	r.m2 = scrape(b, a)
	r.rss, r.hwm = procMem(b, d.pid())
	r.total = time.Since(began)

	ms := func(v time.Duration) float64 { return float64(v.Microseconds()) / 1000 }
	b.ReportMetric(0, "ns/op") // the whole run's time, meaningless here
	b.ReportMetric(ms(r.startToRoutes), "start-to-routes-ms")
	b.ReportMetric(ms(percentile(r.labelled, 50)), "label-p50-ms")
	b.ReportMetric(ms(percentile(r.labelled, 99)), "label-p99-ms")
	b.ReportMetric(ms(percentile(r.unlabelled, 50)), "unlabel-p50-ms")
	b.ReportMetric(ms(percentile(r.unlabelled, 99)), "unlabel-p99-ms")
	b.ReportMetric(r.hwm, "rss-hwm-MiB")
	fmt.Print(r.table())
}

// routesOnlyResult is what one run of BenchmarkRoutesOnly5000 measured.
type routesOnlyResult struct {
	vmNodes                     int
	startToRoutes, syncToRoutes time.Duration
	cpuSync, cpuLabels, cpuEnd  cpuTimes
	rssSync, rss, hwm           float64            // MiB
	m0, m1, m2                  map[string]float64 // metrics: after the sync, the label changes, the churn
	labelled, unlabelled        []time.Duration
	watched                     []time.Duration // patch -> the watch event, both ways
	timeouts                    int
	churn                       time.Duration
	load0                       string
	total                       time.Duration
}

func (r routesOnlyResult) table() string {
	g := newGoalTable()
	row := g.row
	cpu := func(from, to cpuTimes) string { return fmt.Sprintf("%v+%v", to.user-from.user, to.sys-from.sys) }
	reconciles := func(m0, m1 map[string]float64) string {
		return fmt.Sprint(m1["vmlane_reconcile_duration_seconds_count"] - m0["vmlane_reconcile_duration_seconds_count"])
	}
	p99l, p99u := percentile(r.labelled, 99), percentile(r.unlabelled, 99)

	row("vmlaned --routes-only", "value", "goal")
	row(fmt.Sprintf("start -> %d VM nodes' routes (of %d Nodes)", r.vmNodes, benchNodes+1), dur(r.startToRoutes), "")
	row("  'node informer synced' -> routes", dur(r.syncToRoutes), "")
	row("  CPU start -> routes (user+sys)", cpu(cpuTimes{}, r.cpuSync), "")
	row("  VmRSS after sync", fmt.Sprintf("%.1f MiB", r.rssSync), "")
	row(fmt.Sprintf("label -> route p50 (%d changes, %d timed out)", len(r.labelled), r.timeouts), ms1(percentile(r.labelled, 50)), "")
	row("label -> route p99", ms1(p99l), "< 100ms", p99l < 100*time.Millisecond && r.timeouts == 0)
	row(fmt.Sprintf("unlabel -> route withdrawn p50 (%d changes)", len(r.unlabelled)), ms1(percentile(r.unlabelled, 50)), "")
	row("unlabel -> route withdrawn p99", ms1(p99u), "< 100ms", p99u < 100*time.Millisecond && r.timeouts == 0)
	row("  reference: patch -> watch event p50 / p99", ms1(percentile(r.watched, 50))+" / "+ms1(percentile(r.watched, 99)), "")
	row("  reconciles, CPU during the label changes", reconciles(r.m0, r.m1)+", "+cpu(r.cpuSync, r.cpuLabels), "")
	row(fmt.Sprintf("%d address changes of other Nodes (churn to ignore)", benchChurn), dur(r.churn), "")
	row("  reconciles, CPU during the churn", reconciles(r.m1, r.m2)+", "+cpu(r.cpuLabels, r.cpuEnd), "")
	row("VmRSS at the end", fmt.Sprintf("%.1f MiB", r.rss), "")
	row("VmHWM (peak RSS)", fmt.Sprintf("%.1f MiB", r.hwm), "< 100 MiB", r.hwm < 100)
	row("  Go heap in use / sys, goroutines", fmt.Sprintf("%.1f / %.1f MiB, %.0f", r.m2["go_memstats_heap_inuse_bytes"]/(1<<20), r.m2["go_memstats_sys_bytes"]/(1<<20), r.m2["go_goroutines"]), "")
	row("whole benchmark; 1-min load average at start / end", r.total.Round(time.Second).String()+"; "+r.load0+" / "+loadAvg(), "")
	return g.String()
}

// labelChanges labels benchLabelChanges Nodes that are not VM nodes, one
// after another, each timed from just before its patch to the kernel's
// event for its route, and then takes the label off again, timed to the
// route's deletion. watched holds, for both, the part until the
// apiserver's watch delivered the patch to a watcher in this process.
func labelChanges(tb testing.TB, client kubernetes.Interface, w *routeWatch, nodes []*corev1.Node) (labelled, unlabelled, watched []time.Duration, timeouts int) {
	tb.Helper()
	ctx := context.Background()
	nw := watchNodes(tb, client)
	// patch sets (or, with null, removes) node i's label; nodes[i]
	// follows, so that churn's updates do not conflict.
	patch := func(i int, value string) string {
		p := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, routes.VMNodeLabel, value)
		n, err := client.CoreV1().Nodes().Patch(ctx, nodes[i].Name, types.MergePatchType, []byte(p), metav1.PatchOptions{})
		if err != nil {
			tb.Fatalf("patching %s: %v", nodes[i].Name, err)
		}
		nodes[i] = n
		return n.ResourceVersion
	}
	wait := func(ch <-chan time.Time, t0 time.Time, rv string, into *[]time.Duration) {
		select {
		case t1 := <-ch:
			*into = append(*into, t1.Sub(t0))
			if t, ok := nw.when(rv); ok {
				watched = append(watched, t.Sub(t0))
			}
		case <-w.dead:
			tb.Fatalf("route watch ended: %v", w.err)
		case <-time.After(benchSampleTimeout):
			*into = append(*into, benchSampleTimeout)
			timeouts++
		}
	}
	for k := range benchLabelChanges {
		i := k*benchNodes/benchLabelChanges + 1 + k%7 // spread over the /9, never a VM node
		if isBenchVM(i) {
			tb.Fatalf("node %d is a VM node already", i)
		}
		dst := benchPodCIDR(i)
		routed := w.expect(routes.Route{Dst: dst, Via: benchNodeIP(i, 0)})
		t0 := time.Now()
		wait(routed, t0, patch(i, `"true"`), &labelled)
		time.Sleep(time.Duration(k*37%100) * time.Millisecond)
		gone := w.expectGone(dst)
		t0 = time.Now()
		wait(gone, t0, patch(i, "null"), &unlabelled)
		time.Sleep(time.Duration(k*53%100) * time.Millisecond)
	}
	return labelled, unlabelled, watched, timeouts
}

// churn moves benchChurn Nodes that are not VM nodes to their other
// address, one after another, 20 ms apart, and returns how long that took.
func churn(tb testing.TB, client kubernetes.Interface, nodes []*corev1.Node) time.Duration {
	tb.Helper()
	ctx := context.Background()
	t0 := time.Now()
	for k := range benchChurn {
		i := k*benchNodes/benchChurn + 2 + k%5
		if isBenchVM(i) {
			i++
		}
		n := nodes[i].DeepCopy()
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: benchNodeIP(i, 1).String()}}
		updated, err := client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		if err != nil {
			tb.Fatalf("moving node %s: %v", n.Name, err)
		}
		nodes[i] = updated
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(t0)
}

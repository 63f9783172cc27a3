package main

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/routes"
)

// benchVMs VMs, each away from its home node: VM i's address is the
// (2 + i/benchNodes)th of node i%benchNodes's podCIDR, and it runs on the
// next node, so every node routes its /32 there.
const (
	benchVMs   = 10000
	benchMoves = 50
)

func benchVMAddr(i int) netip.Addr {
	a := benchPodCIDR(i % benchNodes).Addr().As4()
	a[3] = byte(2 + i/benchNodes)
	return netip.AddrFrom4(a)
}

func benchVMHolder(i int) int { return (i%benchNodes + 1) % benchNodes }

// benchVMRoutes is every route vmlaned installs with VMs away from home:
// the podCIDR of each node and the /32 of each VM via its holder.
func benchVMRoutes(holder func(i int) int) map[netip.Prefix]netip.Addr {
	want := benchRoutes(benchNodes, nil)
	for i := range benchVMs {
		want[netip.PrefixFrom(benchVMAddr(i), 32)] = benchNodeIP(holder(i), 0)
	}
	return want
}

// BenchmarkRouteController5000VMs is the route controller at 5,000 Nodes
// and 10,000 VMs away from their home nodes (10,000 VMClaims, 10,000 /32
// routes more) in a real apiserver, against the same controller at the
// same 5,000 Nodes without VMs, measured in the same run: vmlaned's start to
// the last route, its RSS after the sync, and the time from a VMClaim's
// update naming a new node (what the new node's vmlaned writes after the
// VM's ADD there) to the VM's /32 via that node, p50 and p99 over
// benchMoves moves. The real-node suite measures the rest of a move, from
// the ADD to the claim in the API (TestVMIdentityRestart). Run it with
// -benchtime 1x:
//
//	VMLANE_CONTROLPLANE_DIR=... go test -run '^$' -bench RouteController5000VMs -benchtime 1x -timeout 20m ./cmd/vmlaned
func BenchmarkRouteController5000VMs(b *testing.B) {
	if b.N > 1 {
		b.Skip("measures once per run; use -benchtime 1x")
	}
	c := newCluster(b)
	a := c.host("a", benchSelfIP+"/16")
	dyn, err := dynamic.NewForConfig(c.cfg)
	if err != nil {
		b.Fatal(err)
	}
	installVMClaimCRD(b, dyn)
	t0 := time.Now()
	c.createNodes(nil)
	b.Logf("created %d Nodes in %v", benchNodes, time.Since(t0).Round(time.Millisecond))

	// The reference: the same controller, the same Nodes, no VMs.
	ref := runToRoutes(b, c, a, benchRoutes(benchNodes, nil))

	t0 = time.Now()
	createVMClaims(b, dyn)
	b.Logf("created %d VMClaims in %v", benchVMs, time.Since(t0).Round(time.Millisecond))

	want := benchVMRoutes(benchVMHolder)
	w := watchRoutes(b, a, len(want))
	d := c.startBenchDaemon(a)
	vms := waitRoutes(b, d, w)
	vms.rss, vms.hwm = procMem(b, d.pid())
	checkInstalled(b, a, want)

	// Moves: VM i's claim names node m now; its /32 follows.
	m0 := scrape(b, a)
	api := dyn.Resource(vmClaimGVR).Namespace("default")
	var lat []time.Duration
	for k := range benchMoves {
		i := k * (benchVMs / benchMoves)
		m := (benchVMHolder(i) + 1 + k) % benchNodes
		got := w.expect(routes.Route{Dst: netip.PrefixFrom(benchVMAddr(i), 32), Via: benchNodeIP(m, 0)})
		u, err := api.Get(context.Background(), benchVMName(i), metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		_ = unstructured.SetNestedField(u.Object, fmt.Sprintf("n%04d", m), "status", "node")
		_ = unstructured.SetNestedField(u.Object, "default/"+benchVMName(i)+"-moved", "status", "pod")
		if _, err := api.Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		sent := time.Now()
		select {
		case at := <-got:
			lat = append(lat, at.Sub(sent))
		case <-time.After(benchSampleTimeout):
			b.Fatalf("move %d: VM %s's /32 not via n%04d within %v", k, benchVMName(i), m, benchSampleTimeout)
		}
	}
	vms.rssEnd, _ = procMem(b, d.pid())
	// Where a move's time goes in vmlaned: its claims passes, and its
	// route reconciles (the desired state computed from every Node and
	// VM, the kernel's table read and diffed), per pass and per reconcile
	// while the moves ran.
	m1 := scrape(b, a)
	avg := func(name string) string {
		n := m1[name+"_count"] - m0[name+"_count"]
		if n <= 0 {
			return "none"
		}
		return fmt.Sprintf("%.1f ms × %.0f", 1000*(m1[name+"_sum"]-m0[name+"_sum"])/n, n)
	}

	ms := func(v time.Duration) float64 { return float64(v.Microseconds()) / 1000 }
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(ms(vms.startToRoutes), "start-to-routes-ms")
	b.ReportMetric(float64(vms.startToRoutes)/float64(ref.startToRoutes), "vms/novms")
	b.ReportMetric(vms.rss, "rss-MiB")
	b.ReportMetric(ms(percentile(lat, 50)), "move-p50-ms")
	b.ReportMetric(ms(percentile(lat, 99)), "move-p99-ms")
	fmt.Printf(`
route controller, 5,000 Nodes, with and without 10,000 VMs away from home (one run)
| | no VMs | 10,000 VMs | ratio |
|---|---|---|---|
| routes | %d | %d | |
| vmlaned start → last route | %s | %s | %.2f× |
| RSS after the sync | %.1f MiB | %.1f MiB | %.2f× |
| VmHWM | %.1f MiB | %.1f MiB | |
| VMClaim update → the VM's /32 via its new node, p50 / p99 (%d moves) | | %s / %s | |
| during the moves: a claims pass (claims read, checked, handed to the routes), on average × how many | | %s | |
| during the moves: a route reconcile, on average × how many | | %s | |
| of which the desired state's computation | | %s | |
| RSS after the moves | | %.1f MiB | |
`, len(benchRoutes(benchNodes, nil)), len(want),
		ms1(ref.startToRoutes), ms1(vms.startToRoutes), float64(vms.startToRoutes)/float64(ref.startToRoutes),
		ref.rss, vms.rss, vms.rss/ref.rss, ref.hwm, vms.hwm,
		len(lat), ms1(percentile(lat, 50)), ms1(percentile(lat, 99)),
		avg("vmlane_claims_pass_duration_seconds"), avg("vmlane_reconcile_duration_seconds"), avg("vmlane_desired_compute_duration_seconds"), vms.rssEnd)
}

// syncRun is one vmlaned's run to its routes.
type syncRun struct {
	startToRoutes    time.Duration
	rss, hwm, rssEnd float64
}

// runToRoutes starts vmlaned in a, waits for want, measures, then stops
// vmlaned and flushes its routes.
func runToRoutes(b *testing.B, c *cluster, a *netnstest.NS, want map[netip.Prefix]netip.Addr) syncRun {
	b.Helper()
	w := watchRoutes(b, a, len(want))
	d := c.startBenchDaemon(a)
	r := waitRoutes(b, d, w)
	r.rss, r.hwm = procMem(b, d.pid())
	checkInstalled(b, a, want)
	_ = d.cmd.Process.Kill()
	<-d.exited
	a.MustRun(b, "ip", "route", "flush", "proto", fmt.Sprint(routes.DefaultProtocol))
	return r
}

// waitRoutes waits until the watch has all the routes it wants and says
// how long after vmlaned's start that was.
func waitRoutes(b *testing.B, d *benchDaemon, w *routeWatch) syncRun {
	b.Helper()
	select {
	case <-w.full:
	case <-w.dead:
		b.Fatalf("route watch ended: %v", w.err)
	case <-d.exited:
		b.Fatalf("vmlaned exited during the full sync:\n%s", d.log.String())
	case <-time.After(5 * time.Minute):
		b.Fatalf("%d of %d routes after 5m", w.count(), w.want)
	}
	return syncRun{startToRoutes: w.fullAt.Sub(d.start)}
}

func benchVMName(i int) string { return fmt.Sprintf("vm%05d", i) }

// installVMClaimCRD creates the VMClaim CRD from the manifests and waits
// until VMClaims can be listed.
func installVMClaimCRD(b *testing.B, dyn dynamic.Interface) {
	b.Helper()
	applyManifest(b, dyn, "vmclaims.yaml")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		_, err := dyn.Resource(vmClaimGVR).List(context.Background(), metav1.ListOptions{Limit: 1})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("VMClaims not served a minute after the CRD: %v", err)
		}
	}
}

// createVMClaims creates benchVMs claims, as the holders' vmlaneds would
// have published them, from benchWorkers clients.
func createVMClaims(b *testing.B, dyn dynamic.Interface) {
	b.Helper()
	err := inParallel(benchVMs, func(i int) error {
		a := benchVMAddr(i).As4()
		st := claimStatus{
			IPv4: netip.PrefixFrom(benchVMAddr(i), 24).String(),
			MAC:  fmt.Sprintf("02:76:%02x:%02x:%02x:%02x", a[0], a[1], a[2], a[3]),
			Node: fmt.Sprintf("n%04d", benchVMHolder(i)), Pod: "default/" + benchVMName(i),
		}
		return applyClaim(context.Background(), dyn.Resource(vmClaimGVR), claimAction{Op: "create", VM: "default/" + benchVMName(i), Status: st}, "")
	})
	if err != nil {
		b.Fatalf("creating VMClaims: %v", strings.SplitN(err.Error(), "\n", 2)[0])
	}
}

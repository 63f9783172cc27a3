package routes

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"
)

// benchVMNodes is a cluster of n nodes with /24 podCIDRs in 10.128.0.0/9
// and addresses in 10.99.0.0/16.
func benchVMNodes(n int) []Node {
	nodes := make([]Node, n)
	for i := range nodes {
		nodes[i] = Node{
			Name:     fmt.Sprintf("node-%d", i),
			PodCIDRs: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(128 + i/256), byte(i % 256), 0}), 24)},
			Addrs:    []netip.Addr{netip.AddrFrom4([4]byte{10, 99, byte(1 + i/250), byte(1 + i%250)})},
			Linux:    true, Ready: true,
		}
	}
	return nodes
}

// benchMovedVMs is m VMs, each moved from node i's subnet to node i+1.
func benchMovedVMs(nodes []Node, m int) []VM {
	vms := make([]VM, m)
	for j := range vms {
		i := j % len(nodes)
		home := nodes[i].PodCIDRs[0].Addr().As4()
		home[3] = byte(2 + j/len(nodes))
		vms[j] = VM{Name: fmt.Sprintf("default/vm-%d", j), Addrs: []netip.Addr{netip.AddrFrom4(home)}, Node: nodes[(i+1)%len(nodes)].Name}
	}
	return vms
}

// BenchmarkComputeVMs is the route controller's pure step at 5,000 nodes,
// without VMs (today's route controller) and with 10,000 VMs that moved to
// another node (10,000 more /32 routes): ns/op is one Compute, and
// heap-MiB what the desired state and the VM list hold once it returns.
// The reconcile after it costs one netlink replace per route, as for a
// pod subnet's (BenchmarkRouteController5000).
//
//	go test -run '^$' -bench ComputeVMs ./routes
func BenchmarkComputeVMs(b *testing.B) {
	nodes := benchVMNodes(5000)
	for _, m := range []int{0, 10000} {
		vms := benchMovedVMs(nodes, m)
		b.Run(fmt.Sprintf("nodes=5000/vms=%d", m), func(b *testing.B) {
			var d Desired
			b.ReportAllocs()
			for b.Loop() {
				d = Compute(nodes, Policy{Self: "node-0", VMs: vms})
			}
			b.StopTimer()
			if want := 4999 + m - m/len(nodes); len(d.Routes) < 4999+m-2*(m/len(nodes)+1) || len(d.Routes) > want {
				b.Fatalf("%d routes, want about %d", len(d.Routes), want)
			}
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "heap-MiB")
			b.ReportMetric(float64(len(d.Routes)), "routes")
			runtime.KeepAlive(d)
			runtime.KeepAlive(vms)
		})
	}
}

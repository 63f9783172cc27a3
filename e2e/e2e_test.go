//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmlane/vmlane/e2e/cluster"
	"github.com/vmlane/vmlane/internal/netaddr"
	"github.com/vmlane/vmlane/leases"
	"github.com/vmlane/vmlane/routes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestVMsReachEachOtherAcrossNodes: two VM pods on each of two nodes got
// their reserved addresses by DHCP (setup checks each guest's lease against
// the CNI result), their leases are bound, and every VM pings every other
// by pod IP, across nodes, and is seen by it with its own pod IP: no NAT
// between pod subnets.
func TestVMsReachEachOtherAcrossNodes(t *testing.T) {
	for _, p := range pods("a1", "a2", "b1", "b2") {
		snap, err := leases.Read(p.Node.LeaseFile())
		if err != nil {
			t.Fatal(err)
		}
		l, ok := snap.ByMAC(p.MAC)
		if !ok || l.State != leases.StateBound || l.IP != p.IP || l.Pod.Name != p.Name {
			t.Errorf("%s's lease on %s: %+v (found %v), want bound to %s", p.Name, p.Node.Name, l, ok, p.IP)
		}
	}
	m := cluster.PingMatrix(ctx(t), pods("a1", "a2", "b1", "b2"), 3)
	var b strings.Builder
	m.Write(&b)
	t.Logf("ping matrix:\n%s", b.String())
	for _, f := range m.Failures() {
		t.Error(f)
	}
}

// TestPlainPodReachesVMs: a plain (container) pod on the third node and
// the VMs reach each other both ways, again without NAT.
func TestPlainPodReachesVMs(t *testing.T) {
	ctx := ctx(t)
	for _, vm := range pods("a1", "b1") {
		for _, pair := range [][2]*cluster.Pod{{plain, vm}, {vm, plain}} {
			src, dst := pair[0], pair[1]
			if r, err := src.Ping(ctx, dst.IP, 3); err != nil || !r.OK {
				t.Errorf("%s → %s: ping %+v, %v", src.Name, dst.Name, r, err)
			}
			if seen, err := src.WhoAmI(ctx, dst.IP); err != nil || seen != src.IP.String() {
				t.Errorf("%s → %s: seen as %q (%v), want %s", src.Name, dst.Name, seen, err, src.IP)
			}
		}
	}
}

// TestVMReachesOutsideThroughMasquerade: the outside host has no route to
// the pod network, so a VM reaches it only masqueraded, as its node.
func TestVMReachesOutsideThroughMasquerade(t *testing.T) {
	ctx := ctx(t)
	if out, err := c.Outside.Run("ip", "route", "get", vms["a1"].IP.String()); err == nil {
		t.Fatalf("the outside host routes to pod %s (%s): the test would prove nothing", vms["a1"].IP, out)
	}
	for _, vm := range pods("a1", "b2") {
		if r, err := vm.Ping(ctx, cluster.OutsideIP, 3); err != nil || !r.OK {
			t.Errorf("%s → outside: ping %+v, %v", vm.Name, r, err)
		}
		seen, err := vm.WhoAmI(ctx, cluster.OutsideIP)
		if want := vm.Node.IP.String(); err != nil || seen != want {
			t.Errorf("%s → outside: seen as %q (%v), want its node's address %s", vm.Name, seen, err, want)
		}
	}
}

// TestDualStackPodsReachEachOtherByIPv6: every pod, VM or plain, pings
// every other by its IPv6 address, across nodes, and is seen by it with
// its own IPv6 address: no NAT inside the cluster's IPv6 pod network.
// The VMs got their addresses by DHCPv6 and their default router from the
// bridges' router advertisements (setup checks both).
func TestDualStackPodsReachEachOtherByIPv6(t *testing.T) {
	ps := pods("a1", "a2", "b1", "b2", "c1")
	for _, p := range ps {
		if !p.IP6.IsValid() {
			t.Fatalf("%s has no IPv6 address", p.Name)
		}
		snap, err := leases.Read(p.Node.LeaseFile())
		if err != nil {
			t.Fatal(err)
		}
		if l, ok := snap.ByIP(p.IP6); !ok || l.IP != p.IP || (p.VM != nil && l.State6 != leases.StateBound) {
			t.Errorf("%s's lease for %s: %+v (found %v), want it, bound over DHCPv6 for a VM", p.Name, p.IP6, l, ok)
		}
	}
	m := cluster.PingMatrix6(ctx(t), ps, 3)
	var b strings.Builder
	m.Write(&b)
	t.Logf("IPv6 ping matrix:\n%s", b.String())
	for _, f := range m.Failures() {
		t.Error(f)
	}
}

// TestPodsReachOutsideOverIPv6ThroughMasquerade: the outside host has no
// route to the IPv6 pod network either, so pods reach it over IPv6 only
// masqueraded by ip6tables, as their node's IPv6 address.
func TestPodsReachOutsideOverIPv6ThroughMasquerade(t *testing.T) {
	ctx := ctx(t)
	if out, err := c.Outside.Run("ip", "-6", "route", "get", vms["a1"].IP6.String()); err == nil {
		t.Fatalf("the outside host routes to pod %s (%s): the test would prove nothing", vms["a1"].IP6, out)
	}
	for _, p := range pods("a1", "b2", "c1") {
		if r, err := p.Ping(ctx, cluster.OutsideIP6, 3); err != nil || !r.OK {
			t.Errorf("%s → outside over IPv6: ping %+v, %v", p.Name, r, err)
		}
		seen, err := p.WhoAmI(ctx, cluster.OutsideIP6)
		if want := p.Node.IP6.String(); err != nil || seen != want {
			t.Errorf("%s → outside over IPv6: seen as %q (%v), want its node's address %s", p.Name, seen, err, want)
		}
	}
}

// TestNodeDeletedAndReAdded: when node-c's Node object goes, every other
// node drops its route; when it comes back, so does the route, and the
// plain pod on it is reachable again, and node-c's vmlaned marks the new
// Node object's network available.
func TestNodeDeletedAndReAdded(t *testing.T) {
	nc := c.Node("node-c")
	route := nc.PodCIDR.String() + " via " + nc.IP.String()
	c.DeleteNodeObject(t, nc.Name)
	for _, n := range []*cluster.Node{c.Node("node-a"), c.Node("node-b")} {
		cluster.Eventually(t, n.Name+" to drop "+route, func() (bool, string) {
			r := n.Routes()
			return !strings.Contains(r, nc.PodCIDR.String()), r
		})
	}
	c.CreateNodeObject(t, nc.NodeSpec)
	for _, n := range []*cluster.Node{c.Node("node-a"), c.Node("node-b")} {
		cluster.Eventually(t, n.Name+" to restore "+route, func() (bool, string) {
			r := n.Routes()
			return strings.Contains(r, route), r
		})
	}
	if r, err := vms["a2"].Ping(ctx(t), plain.IP, 3); err != nil || !r.OK {
		t.Errorf("a2 → c1 after node-c came back: %+v, %v", r, err)
	}
	// The new Node object has no NetworkUnavailable condition; node-c's
	// vmlaned sets it again at its next resync.
	cluster.Eventually(t, "node-c's NetworkUnavailable=False again", func() (bool, string) {
		n, err := c.Client.CoreV1().Nodes().Get(context.Background(), nc.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return routes.NetworkAvailable(n), fmt.Sprint(n.Status.Conditions)
	})
}

// TestDaemonSIGKILLKeepsTraffic: vmlaned on node-a is killed with SIGKILL
// while a1 pings b1; no ping is lost. Restarted, it adopts what is there:
// no route is added, changed or removed on node-a (`ip monitor route`
// stays quiet) and its lease file is byte for byte the same.
func TestDaemonSIGKILLKeepsTraffic(t *testing.T) {
	na := c.Node("node-a")
	routesBefore := na.Routes()
	leasesBefore, err := os.ReadFile(na.LeaseFile())
	if err != nil {
		t.Fatal(err)
	}
	mon := na.NS.Command("ip", "-o", "monitor", "route")
	var events bytes.Buffer
	mon.Stdout = &events
	mon.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := mon.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { mon.Process.Kill(); mon.Wait() }()

	const count = 40 // 8 s at 0.2 s intervals
	type res struct {
		r   cluster.PingResult
		err error
	}
	done := make(chan res, 1)
	go func() {
		r, err := vms["a1"].Ping(ctx(t), vms["b1"].IP, count)
		done <- res{r, err}
	}()
	time.Sleep(time.Second)
	na.Daemon().Kill()
	time.Sleep(time.Second)
	d := na.StartDaemon(t)
	cluster.Eventually(t, "the restarted vmlaned to be ready", func() (bool, string) {
		ok, why := na.Ready()
		return ok, why + "\n" + d.Logs()
	})
	got := <-done
	if got.err != nil || got.r.Recv != count {
		t.Errorf("a1 → b1 across the kill: %+v, %v; want all %d replies", got.r, got.err, count)
	}
	// Give a late reconcile its chance to show up in the monitor.
	time.Sleep(2 * time.Second)
	mon.Process.Kill()
	mon.Wait()
	if ev := strings.TrimSpace(events.String()); ev != "" {
		t.Errorf("route changes on node-a across the restart:\n%s", ev)
	}
	if r := na.Routes(); r != routesBefore {
		t.Errorf("routes before the kill:\n%s\nafter the restart:\n%s", routesBefore, r)
	}
	if after, _ := os.ReadFile(na.LeaseFile()); !bytes.Equal(after, leasesBefore) {
		t.Errorf("lease file changed across the restart:\nbefore %s\nafter  %s", leasesBefore, after)
	}
}

// TestDeletedPodsAddressReusedLast: deleting VM pod b2 releases its lease
// at once; node-b's next pods get every other free address first, and b2's
// address only when nothing else is left.
func TestDeletedPodsAddressReusedLast(t *testing.T) {
	nb := c.Node("node-b")
	b2 := vms["b2"]
	freed := b2.IP
	b2.Delete(t)
	snap, err := leases.Read(nb.LeaseFile())
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := snap.ByIP(freed); ok {
		t.Fatalf("b2's address %s is still leased after CNI DEL: %+v", freed, l)
	}
	free := 0
	for a := nodeBCIDR.Addr().Next().Next(); nodeBCIDR.Contains(a) && a != netaddr.LastAddr(nodeBCIDR); a = a.Next() {
		if _, held := snap.ByIP(a); !held {
			free++
		}
	}
	for i := 1; i <= free; i++ {
		p := nb.AddPod(t, "reuse"+string(rune('a'+i-1)))
		if p.IP == freed && i < free {
			t.Fatalf("pod %d of %d got b2's freed address %s while %d others were free", i, free, freed, free-i)
		}
		if i == free && p.IP != freed {
			t.Errorf("the last free address went to pod %d: %s, want b2's %s", i, p.IP, freed)
		}
	}
}

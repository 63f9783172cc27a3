//go:build e2e

package crosssubnet

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/vmlane/vmlane/e2e/cluster"
	"github.com/vmlane/vmlane/internal/testing/netnstest"
)

// migrationPings is how many pings each vantage sends per migration, one
// every 10 ms: 1.5 s before the migration starts, the migration (under a
// second here) and the rest after it.
const migrationPings = 700

// vantage is where pings to the migrating VM come from: a pod, or the
// router (a host behind it).
type vantage struct {
	name string
	ns   *netnstest.NS
}

// crossMigration live-migrates VM default/vm back and forth between
// node-a, its home on the switch, and node-c behind the router, runs
// times (VMLANE_MIGRATIONS, 4 unless set), as TestVMLiveMigration of the
// real-node suite does on one subnet. Each vantage pings the VM's IPv4
// and IPv6 addresses every 10 ms across each migration, and a TCP
// connection from b1, opened before, finishes its request after it.
// Until the guest runs on the target, the target routes the VM where it
// runs (a route with a next hop), not onto its own bridge. check, when
// set, is called after each migration with the node the VM runs on and
// its pod there. The test fails when a vantage's pings do not come back
// or a route never moves; it logs each run's QEMU downtime and the
// guest's whole pause, the switch's times in the kernels and each
// vantage's loss against both.
func crossMigration(t *testing.T, vm string, vantages []vantage, check func(t *testing.T, on *cluster.Node, p *cluster.Pod)) {
	runs := cluster.MigrationCount(t, 4)
	a, cn := c.Node("node-a"), c.Node("node-c")
	// Before the pods' own cleanups, so it runs after them.
	t.Cleanup(func() { releaseVM(t, vm) })
	src := a.AddVMPodOf(t, vm+"-0", cluster.VMPod{VM: vm})
	src.WaitVM(t)
	cluster.Eventually(t, "VMClaim default/"+vm+" on node-a", func() (bool, string) {
		out, _ := c.Kubectl("get", "vmclaim", vm, "-o", "jsonpath={.status.node} {.status.home}")
		return out == "node-a node-a", out
	})
	addr, addr6 := src.IP, src.IP6
	var keys []string
	for _, v := range vantages {
		keys = append(keys, v.name+" "+cluster.Family(addr), v.name+" "+cluster.Family(addr6))
	}

	// Every vantage reaches the VM before the first migration's pings
	// start. A guest answers no neighbour solicitation for an address it
	// still tests for duplicates (DAD, the second after its DHCPv6 lease):
	// the pings of that second went unanswered, up to 1.75 s, and counted
	// as the migration's loss. (Later migrations follow pings that came
	// back: Pinged checks the last.)
	for _, v := range vantages {
		for _, d := range []netip.Addr{addr, addr6} {
			cluster.Eventually(t, fmt.Sprintf("%s reaches %s before the first migration", v.name, d), func() (bool, string) {
				out, err := v.ns.Run("busybox", "ping", "-c", "1", "-W", "1", d.String())
				return err == nil, out
			})
		}
	}

	var results []cluster.MigrationRun
	from, to := a, cn
	for i := 1; i <= runs; i++ {
		dst := to.AddVMPodOf(t, fmt.Sprintf("%s-%d", vm, i), cluster.VMPod{VM: vm, From: src})
		if dst.IP != addr || dst.IP6 != addr6 || dst.MAC != src.MAC {
			t.Fatalf("migration %d: %s on %s got %s %s %s, want the VM's %s %s %s", i, dst.Name, to.Name, dst.IP, dst.IP6, dst.MAC, addr, addr6, src.MAC)
		}
		r := cluster.MigrationRun{N: i, From: from.Name, To: to.Name, Pod: dst.Name, Loss: map[string]time.Duration{}}
		for _, d := range []netip.Addr{addr, addr6} {
			if rt := cluster.RouteTo(t, to.NS, d); rt.Gw == nil {
				t.Errorf("migration %d: before it, %s routes %s onto a link (%s), where no guest runs yet: its own pods lose the VM", i, to.Name, d, rt)
			}
		}

		// Every kernel that routes the VM: each node's, and the
		// router's in bgp mode. Its route "moved" once it is no longer
		// the one it had before the migration.
		type kernel struct {
			name string
			ns   *netnstest.NS
		}
		var kernels []kernel
		for _, n := range c.Nodes {
			kernels = append(kernels, kernel{n.Name, n.NS})
		}
		if mode == "bgp" {
			kernels = append(kernels, kernel{"router", c.Router})
		}
		var clockNodes []cluster.ClockNode
		for _, k := range kernels {
			before := map[netip.Addr]netlink.Route{addr: cluster.RouteTo(t, k.ns, addr), addr6: cluster.RouteTo(t, k.ns, addr6)}
			clockNodes = append(clockNodes, cluster.ClockNode{Name: k.name, NS: k.ns.Path, Moved: func(a netip.Addr, r netlink.Route) bool {
				return r.LinkIndex != 0 && !sameRoute(r, before[a])
			}})
		}

		tcp := openTCP(t, b1, addr)
		outs := map[string]chan string{}
		for _, v := range vantages {
			for _, d := range []netip.Addr{addr, addr6} {
				name := v.name + " " + cluster.Family(d)
				out := make(chan string, 1)
				outs[name] = out
				go func() {
					o, _ := v.ns.Run("busybox", cluster.PingArgs(d, migrationPings)...)
					out <- o
				}()
			}
		}
		time.Sleep(1500 * time.Millisecond)
		clock := cluster.StartMigrationClock(t, to.NS.Path, src.MAC, []netip.Addr{addr, addr6}, clockNodes)
		st, err := src.MigrateTo(dst)
		r.MigrationStatus = st
		if err != nil {
			t.Fatalf("migration %d: %v", i, err)
		}
		for j, k := range kernels {
			for _, d := range []netip.Addr{addr, addr6} {
				cluster.WaitFor(t, 30*time.Second, fmt.Sprintf("migration %d: %s routes %s the new way", i, k.name, d), func() (bool, string) {
					rt := cluster.RouteTo(t, k.ns, d)
					return clockNodes[j].Moved(d, rt), rt.String()
				})
			}
		}
		cluster.Eventually(t, fmt.Sprintf("migration %d: VMClaim default/%s on %s", i, vm, to.Name), func() (bool, string) {
			out, _ := c.Kubectl("get", "vmclaim", vm, "-o", "jsonpath={.status.node} {.status.pod}")
			return out == to.Name+" default/"+dst.Name, out
		})
		if check != nil {
			check(t, to, dst)
		}
		if out := tcp(); !strings.Contains(out, "200 OK") || !strings.Contains(out, "\n"+b1.IP.String()) {
			t.Errorf("migration %d: b1's TCP connection opened before it: want 200 OK and %s (no NAT) after it, got\n%s", i, b1.IP, out)
		}
		r.Clocked(clock)
		ok := true
		for _, k := range keys {
			if err := r.Pinged(k, <-outs[k], migrationPings); err != nil {
				ok = false
				t.Errorf("migration %d: %v", i, err)
			}
		}
		results = append(results, r)
		t.Logf("migration %d of %d: %s", i, runs, r)
		src.Delete(t) // KubeVirt deletes the source's pod once it is done
		if !ok {
			break
		}
		src, from, to = dst, to, from
	}
	t.Logf("live migrations of VM default/%s across the router, --cross-subnet=%s (make e2e-cross RUN=%s):\n%s",
		vm, mode, t.Name(), cluster.MigrationTable(results, keys))
}

// sameRoute reports whether a and b leave by the same link to the same
// next hop.
func sameRoute(a, b netlink.Route) bool {
	return a.LinkIndex == b.LinkIndex && a.Gw.Equal(b.Gw)
}

// openTCP opens a TCP connection from p to addr's web server and sends
// the first line of a request; the returned func finishes the request and
// returns what came back (or after a minute, what had).
func openTCP(t *testing.T, p *cluster.Pod, addr netip.Addr) func() string {
	fifo := filepath.Join(t.TempDir(), "request")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan string, 1)
	go func() {
		out, err := p.NS.Run("sh", "-c", fmt.Sprintf(`(printf 'GET /cgi-bin/whoami HTTP/1.0\r\n'; cat %s; sleep 3) | busybox nc %s 80`, fifo, addr))
		done <- fmt.Sprintf("%s (err %v)", out, err)
	}()
	return func() string {
		if err := os.WriteFile(fifo, []byte("\r\n"), 0); err != nil {
			return err.Error()
		}
		select {
		case out := <-done:
			return out
		case <-time.After(time.Minute):
			return "no answer in a minute"
		}
	}
}

// releaseVM gives back VM default/vm's held addresses, on node-c and
// then on node-a (its home), once the tests' cleanups deleted its pods,
// and waits for its claim and its host routes to go.
func releaseVM(t *testing.T, vm string) {
	cluster.Eventually(t, "VM default/"+vm+" released, its claim and host routes gone", func() (bool, string) {
		var said []string
		for _, n := range []string{"node-c", "node-a"} {
			nd := c.Node(n)
			out, _ := nd.NS.Run(filepath.Join(c.Opts.BinDir, "vmlanectl"), "claims", "release", "--lease-file", nd.LeaseFile(), "default/"+vm)
			said = append(said, n+": "+out)
		}
		time.Sleep(500 * time.Millisecond) // a claims pass on each node
		out, _ := c.Kubectl("get", "vmclaims", "-o", "name")
		if strings.Contains(out+"\n", "/"+vm+"\n") {
			return false, "claims: " + out + strings.Join(said, "\n")
		}
		for _, n := range c.Nodes {
			// A host route has no prefix length.
			for _, r := range strings.Split(n.Routes()+"\n"+n.Routes6(), "\n") {
				if f := strings.Fields(r); len(f) > 0 && !strings.Contains(f[0], "/") {
					return false, n.Name + ": " + r
				}
			}
		}
		return true, ""
	})
}

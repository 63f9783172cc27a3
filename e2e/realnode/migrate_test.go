//go:build e2e

package realnode

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/vmlane/vmlane/e2e/cluster"
	"github.com/vmlane/vmlane/leases"
)

// TestVMLiveMigration: QEMU live-migrates a running guest from a pod on
// node-a to a pod of the same VM on node-b, the stream carried over TCP
// between the two nodes as KubeVirt carries it. The target pod gets the
// VM's addresses and MAC while the source still runs, and the routes stay
// with the source; when the guest runs on node-b and announces itself
// there (its gratuitous ARP and unsolicited neighbour advertisements, which
// QEMU has the guest send after a migration), node-b's vmlaned hears it on
// its bridge and takes the VM's claim, and every node routes the VM's /32
// and /128 to node-b. Until then node-b has no host route onto its bridge
// for the VM: its own pods reach the guest on node-a, where it runs. A
// ping every 10 ms to the VM's IPv4 address from a pod on each node (the
// target, the source and a third) and a TCP connection from node-c's
// survive; the test prints each vantage's ping loss against QEMU's
// downtime, and the switch's times in the kernels (migrationClock). IPv6
// is checked by its routes and a ping after the migration only: pinged
// from every vantage throughout, the guest loses its home node's pods once
// its neighbour entries for them expire, about 6 s after the migration
// (the node it moved to answers no NDP for its home subnet, as proxy ARP
// does for IPv4), which is still to be fixed. Then the source's pod goes, as
// KubeVirt deletes it, and nothing changes but node-a's lease turning held.
func TestVMLiveMigration(t *testing.T) {
	a, b, cn := c.RealNode("node-a"), c.RealNode("node-b"), c.RealNode("node-c")
	dir, err := os.MkdirTemp("", "vmlane-mig-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Kubectl("delete", "pod", "vmmig-1", "vmmig-2", "vmmig-client", "vmmig-client-a", "vmmig-client-b", "--ignore-not-found", "--wait=true", "--timeout=60s")
		releaseVM(t, "vmmig")
		os.RemoveAll(dir)
	})

	src := c.StartVMPod(t, "vmmig-1", "node-a", cluster.VMGuest{VM: "vmmig", Migration: dir})
	addr := c.WaitGuest(t, "vmmig-1")
	log, _ := c.Kubectl("logs", "vmmig-1")
	addr6, _ := cluster.GuestAddr6(log)
	if addr != src.IP || addr6 != src.IP6 {
		t.Fatalf("vmmig-1: pod IPs %s %s, the guest got %s %s", src.IP, src.IP6, addr, addr6)
	}
	mac := waitVMLease(t, a, "default/vmmig", leases.StateBound).MAC
	client := plainPod(t, "vmmig-client", "node-c")
	clientA, clientB := plainPod(t, "vmmig-client-a", "node-a"), plainPod(t, "vmmig-client-b", "node-b")
	if r, out := c.PingFrom(client, addr, 3, "0.2"); !r.OK {
		t.Fatalf("node-c's pod → the VM on node-a: %d of 3 answered\n%s", r.Recv, out)
	}

	// The target: the same VM on node-b while the source runs. It gets
	// the VM's addresses and MAC; the claim and the routes stay.
	dst := c.StartVMPod(t, "vmmig-2", "node-b", cluster.VMGuest{VM: "vmmig", Migration: dir, Incoming: true, MigrationFrom: "vmmig-1"})
	if dst.IP != addr || dst.IP6 != addr6 {
		t.Fatalf("vmmig-2 on node-b: pod IPs %s %s, want the VM's %s %s", dst.IP, dst.IP6, addr, addr6)
	}
	if l := waitVMLease(t, b, "default/vmmig", leases.StateReserved); l.MAC != mac || !l.Home.Contains(addr) {
		t.Errorf("node-b's lease %+v, want the VM's MAC %s and its home subnet", l, mac)
	}
	time.Sleep(time.Second) // a claims pass or two on every node
	if out, _ := c.Kubectl("get", "vmclaim", "vmmig", "-o", "jsonpath={.status.node} {.status.pod}"); out != "node-a default/vmmig-1" {
		t.Errorf("VMClaim default/vmmig before the migration: %q, want it still with the source, node-a default/vmmig-1", out)
	}
	if via := routeVia(t, cn, addr); via != "10.99.0.11" {
		t.Errorf("node-c routes %s via %s before the migration, want node-a (10.99.0.11)", addr, via)
	}
	// The target routes the VM to the source too: a host route onto its
	// bridge, where no guest runs yet, would blackhole its own pods.
	if via := routeVia(t, b, addr); via != "10.99.0.11" {
		t.Errorf("node-b, the target, routes %s via %s before the migration, want node-a (10.99.0.11), where the guest runs", addr, via)
	}
	if r, out := c.PingFrom(clientB, addr, 3, "0.2"); !r.OK {
		t.Errorf("node-b's pod → the VM still on node-a, with the target's pod on node-b: %d of 3 answered\n%s", r.Recv, out)
	}

	// The migration's way: the source QEMU's stream goes to a socket of
	// the host, over TCP from node-a's address to node-b's, and into the
	// target QEMU's incoming socket.
	proxy, err := cluster.MigrationProxy(a, b, filepath.Join(dir, "proxy.sock"), filepath.Join(dir, "vmmig-2.in"))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	qmp, err := cluster.DialQMP(filepath.Join(dir, "vmmig-1.qmp"), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer qmp.Close()
	if _, err := qmp.Execute("migrate-set-parameters", map[string]any{"max-bandwidth": 1 << 30}); err != nil {
		t.Fatal(err)
	}

	// From node-c's pod: a TCP connection to the guest's web server,
	// opened now and its request finished after the migration, and a
	// ping every 10 ms throughout.
	tcp := make(chan string, 1)
	go func() {
		out, err := c.Exec(client, "sh", "-c", fmt.Sprintf(`rm -f /tmp/go && mkfifo /tmp/go && (printf 'GET /cgi-bin/whoami HTTP/1.0\r\n'; cat /tmp/go; sleep 3) | nc %s 80`, addr))
		tcp <- fmt.Sprintf("%s (err %v)", out, err)
	}()
	const pings = 2000 // 20 s at 10 ms
	vantages := []struct {
		name string
		pod  cluster.KubePod
		out  chan string
	}{
		{"node-c (a third node)", client, make(chan string, 1)},
		{"node-b (the target)", clientB, make(chan string, 1)},
		{"node-a (the source)", clientA, make(chan string, 1)},
	}
	for _, v := range vantages {
		go func() {
			out, _ := c.Exec(v.pod, "ping", "-c", strconv.Itoa(pings), "-i", "0.01", "-W", "2", addr.String())
			v.out <- out
		}()
	}
	time.Sleep(2 * time.Second)
	// The switch's clock: the guest's first frame on node-b's bridge, and
	// the VM's /32 in each kernel after it.
	clock := startMigrationClock(t, b, netip.MustParseAddr("10.99.0.12"), []*cluster.RealNode{a, cn}, mac, addr)

	start := time.Now()
	if _, err := qmp.Execute("migrate", map[string]any{"uri": "unix:" + filepath.Join(dir, "proxy.sock")}); err != nil {
		t.Fatal(err)
	}
	var status struct {
		Status    string `json:"status"`
		TotalTime int64  `json:"total-time"`
		Downtime  int64  `json:"downtime"`
		ErrorDesc string `json:"error-desc"`
	}
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
		r, err := qmp.Execute("query-migrate", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(r, &status); err != nil {
			t.Fatal(err)
		}
		if status.Status == "completed" || status.Status == "failed" || time.Now().After(deadline) {
			break
		}
	}
	ended := time.Now()
	if status.Status != "completed" {
		t.Fatalf("migration %s after %v: %s", status.Status, ended.Sub(start), status.ErrorDesc)
	}
	// Routes on every node: node-a and node-c via node-b, node-b to its
	// bridge (the host route vmlaned adds once it took the claim).
	var converged time.Duration
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if routeVia(t, a, addr) == "10.99.0.12" && routeVia(t, cn, addr) == "10.99.0.12" {
			converged = time.Since(ended)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("routes to %s 30 s after the migration: node-a via %s, node-c via %s, want node-b (10.99.0.12)", addr, routeVia(t, a, addr), routeVia(t, cn, addr))
		}
	}
	cluster.WaitFor(t, 10*time.Second, "node-b routes "+addr.String()+" onto its bridge", func() (bool, string) {
		via := routeVia(t, b, addr)
		return strings.HasPrefix(via, "dev "), via
	})
	for _, n := range []*cluster.RealNode{a, cn} {
		cluster.WaitFor(t, 10*time.Second, n.Name+" routes "+addr6.String()+" via node-b", func() (bool, string) {
			r6 := n.Routes6()
			return strings.Contains(r6, addr6.String()+" via fd99::12"), r6
		})
	}
	if out, _ := c.Kubectl("get", "vmclaim", "vmmig", "-o", "jsonpath={.status.node} {.status.pod}"); out != "node-b default/vmmig-2" {
		t.Errorf("VMClaim default/vmmig after the migration: %q, want node-b default/vmmig-2", out)
	}

	// The TCP connection finishes its request and gets the answer.
	time.Sleep(time.Second)
	if out, err := c.Exec(client, "sh", "-c", `printf '\r\n' > /tmp/go`); err != nil {
		t.Errorf("finishing the request: %v\n%s", err, out)
	}
	select {
	case out := <-tcp:
		if !strings.Contains(out, "200 OK") || !strings.Contains(out, "\n"+client.IP.String()) {
			t.Errorf("the TCP connection opened before the migration: want 200 OK and %s (no NAT), got\n%s", client.IP, out)
		}
	case <-time.After(time.Minute):
		t.Errorf("the TCP connection opened before the migration did not finish")
	}

	t.Logf("live migration of VM default/vmmig, node-a → node-b: %v in all (QEMU: total %d ms, downtime %d ms); routes via node-b on node-a and node-c %v after it ended (polled every 10 ms)",
		ended.Sub(start).Round(time.Millisecond), status.TotalTime, status.Downtime, converged.Round(time.Millisecond))
	if first, after, slowest, ok := clock.stop(); ok {
		t.Logf("  the switch: node-b's bridge first heard the guest %v after QEMU's end was seen; from that frame to the /32 in each kernel: %v, the slowest %v (the goal: under 30 ms p50, 60 ms p99)",
			first.Sub(ended).Round(time.Millisecond), after, slowest.Round(time.Millisecond))
	} else {
		t.Logf("  the switch: node-b's bridge never reported the guest's MAC")
	}
	for _, v := range vantages {
		out := <-v.out
		sent, recv, gap := pingLoss(out, pings)
		loss := time.Duration(gap) * 10 * time.Millisecond
		t.Logf("  ping every 10 ms from %s: %d of %d lost, the longest gap %d pings (%v), %+d ms beyond QEMU's downtime (the goal: at most +20)",
			v.name, sent-recv, sent, gap, loss, loss.Milliseconds()-status.Downtime)
		if gap > 50 {
			t.Logf("  %s: the longest gap began at seq %d; around it:\n%s", v.name, gapStart(out, sent), aroundGap(out, sent))
		}
		if sent < pings*9/10 || recv < sent-500 {
			// Without the switch on the guest's announcement the routes
			// stay with the paused source and every ping after the
			// migration is lost (and a blackhole on the target loses
			// every ping from there until the claim moves); 5 s is far
			// above the goal and far below either.
			t.Errorf("ping from %s across the migration: %d sent, %d answered: want the pings to go on\n%s", v.name, sent, recv, lastLines(out, 5))
			// What the nodes and the pod know of the VM now.
			for _, n := range []*cluster.RealNode{a, b} {
				for _, cmd := range [][]string{{"ip", "neigh", "show", "dev", "vmlane0"}, {"ip", "route", "get", addr.String()}, {"bridge", "fdb", "show", "br", "vmlane0"}} {
					o, _ := n.Run("", cmd...)
					t.Logf("%s: %v:\n%s", n.Name, cmd, o)
				}
			}
			o, _ := c.Exec(v.pod, "ip", "neigh")
			t.Logf("%s: ip neigh:\n%s", v.pod.Name, o)
		}
	}

	// KubeVirt deletes the source's pod once the migration is done.
	if out, err := c.Kubectl("delete", "pod", "vmmig-1", "--wait=true", "--timeout=90s"); err != nil {
		t.Fatal(out, err)
	}
	if l := vmLease(t, a, "default/vmmig"); l.State != leases.StateHeld {
		t.Errorf("node-a's lease of the VM after its pod went: %+v, want held", l)
	}
	if l := vmLease(t, b, "default/vmmig"); l.State == leases.StateHeld || l.Pod.Name != "vmmig-2" {
		t.Errorf("node-b's lease of the VM: %+v, want vmmig-2's, attached", l)
	}
	time.Sleep(time.Second)
	if out, _ := c.Kubectl("get", "vmclaim", "vmmig", "-o", "jsonpath={.status.node} {.status.pod}"); out != "node-b default/vmmig-2" {
		t.Errorf("VMClaim default/vmmig after the source's pod went: %q, want node-b default/vmmig-2", out)
	}
	for _, dst := range []netip.Addr{addr, addr6} {
		if r, out := c.PingFrom(client, dst, 3, "0.2"); !r.OK {
			t.Errorf("node-c's pod → the migrated VM %s: %d of 3 answered\n%s", dst, r.Recv, out)
		}
	}
}

// routeVia is where n routes addr: the gateway, or "dev NAME" for a route
// on a link.
func routeVia(t *testing.T, n *cluster.RealNode, addr netip.Addr) string {
	var rs []netlink.Route
	err := n.NS.Do(func() (err error) {
		rs, err = netlink.RouteGet(addr.AsSlice())
		return err
	})
	if err != nil || len(rs) == 0 {
		t.Logf("%s: route to %s: %v", n.Name, addr, err)
		return ""
	}
	if rs[0].Gw != nil {
		return rs[0].Gw.String()
	}
	return fmt.Sprintf("dev %d", rs[0].LinkIndex)
}

var pingSeq = regexp.MustCompile(`seq=(\d+) `)

// pingLoss reads busybox ping's output: echo requests sent (from its
// summary, or count), replies, and the longest run of requests in a row
// without a reply.
func pingLoss(out string, count int) (sent, recv, gap int) {
	sent = count
	if m := regexp.MustCompile(`(\d+) packets transmitted`).FindStringSubmatch(out); m != nil {
		sent, _ = strconv.Atoi(m[1])
	}
	got := map[int]bool{}
	for _, m := range pingSeq.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		got[n] = true
	}
	recv = len(got)
	run := 0
	for i := 0; i < sent; i++ {
		if got[i] {
			run = 0
			continue
		}
		run++
		gap = max(gap, run)
	}
	return sent, recv, gap
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// gapStart is the first seq of the longest run of lost pings.
func gapStart(out string, sent int) int {
	got := map[int]bool{}
	for _, m := range pingSeq.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		got[n] = true
	}
	best, bestStart, run := 0, -1, 0
	for i := 0; i < sent; i++ {
		if got[i] {
			run = 0
			continue
		}
		run++
		if run > best {
			best, bestStart = run, i-run+1
		}
	}
	return bestStart
}

// aroundGap is the ping lines just before and after the longest gap.
func aroundGap(out string, sent int) string {
	start := gapStart(out, sent)
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		m := pingSeq.FindStringSubmatch(l)
		if m == nil {
			if !strings.Contains(l, "seq=") && strings.TrimSpace(l) != "" {
				keep = append(keep, l)
			}
			continue
		}
		n, _ := strconv.Atoi(m[1])
		if n >= start-3 && n <= start+3 || n > start && len(keep) < 12 {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

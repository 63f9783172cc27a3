//go:build e2e

package realnode

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/vmlane/vmlane/e2e/cluster"
	"github.com/vmlane/vmlane/leases"
)

// TestVMLiveMigration: QEMU live-migrates a running guest back and forth
// between a pod on node-a (its home) and a pod of the same VM on node-b,
// migrations times in a row (VMLANE_MIGRATIONS, 10 unless set), the
// stream carried over TCP between the two nodes as KubeVirt carries it.
// Each target pod gets the VM's addresses and MAC while the source still
// runs, and the routes stay with the source; when the guest runs on the
// target and announces itself there (its gratuitous ARP and unsolicited
// neighbour advertisements, which QEMU has the guest send after a
// migration), the target's vmlaned hears it on its bridge and takes the
// VM's claim, and every node routes the VM there. Until then the target
// has no host route onto its bridge for the VM: its own pods reach the
// guest on the source, where it runs. Then the source's pod goes, as
// KubeVirt deletes it. A ping every 10 ms to the VM's IPv4 and IPv6
// addresses from a pod on each node (the source, the target and node-c)
// goes on through each migration, and a TCP connection from node-c's pod,
// opened before each, finishes its request after it. The test
// fails when a vantage's pings do not come back, a route never moves, or
// a node took no live-migration notice (checkNotices);
// it reports each run's QEMU downtime, the switch's times in the kernels
// (migrationClock) and each vantage's loss against the downtime, and
// writes the table to VMLANE_MIGRATION_REPORT when set (`make bench`).
func TestVMLiveMigration(t *testing.T) {
	a, b, cn := c.RealNode("node-a"), c.RealNode("node-b"), c.RealNode("node-c")
	runs := cluster.MigrationCount(t, 10)
	dir, err := os.MkdirTemp("", "vmlane-mig-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pods := []string{"delete", "pod", "vmmig-client", "vmmig-client-a", "vmmig-client-b", "--ignore-not-found", "--wait=true", "--timeout=60s"}
		for i := 0; i <= runs; i++ {
			pods = append(pods, fmt.Sprintf("vmmig-%d", i))
		}
		c.Kubectl(pods...)
		releaseVM(t, "vmmig")
		os.RemoveAll(dir)
	})

	src := c.StartVMPod(t, "vmmig-0", "node-a", cluster.VMGuest{VM: "vmmig", Migration: dir})
	addr := c.WaitGuest(t, "vmmig-0")
	log, _ := c.Kubectl("logs", "vmmig-0")
	addr6, _ := cluster.GuestAddr6(log)
	if addr != src.IP || addr6 != src.IP6 {
		t.Fatalf("vmmig-0: pod IPs %s %s, the guest got %s %s", src.IP, src.IP6, addr, addr6)
	}
	mac := waitVMLease(t, a, "default/vmmig", leases.StateBound).MAC
	client := plainPod(t, "vmmig-client", "node-c")
	clientA, clientB := plainPod(t, "vmmig-client-a", "node-a"), plainPod(t, "vmmig-client-b", "node-b")
	for _, dst := range []netip.Addr{addr, addr6} {
		if r, out := c.PingFrom(client, dst, 3, "0.2"); !r.OK {
			t.Fatalf("node-c's pod → the VM on node-a at %s: %d of 3 answered\n%s", dst, r.Recv, out)
		}
	}

	m := migrator{t: t, dir: dir, vm: vmAddrs{addr, addr6, mac}, third: cn,
		clients: map[string]cluster.KubePod{"node-a": clientA, "node-b": clientB, "node-c": client}}
	var results []cluster.MigrationRun
	from, to, pod := a, b, "vmmig-0"
	for i := 1; i <= runs; i++ {
		r, ok := m.migrate(i, pod, from, to)
		results = append(results, r)
		t.Logf("migration %d of %d: %s", i, runs, r)
		if !ok {
			break
		}
		pod, from, to = r.Pod, to, from
	}

	report := cluster.MigrationTable(results, []string{"node-a v4", "node-b v4", "node-c v4", "node-a v6", "node-b v6", "node-c v6"})
	t.Logf("live migrations of VM default/vmmig (make e2e-real RUN='^TestVMLiveMigration$'):\n%s", report)
	if p := os.Getenv("VMLANE_MIGRATION_REPORT"); p != "" {
		if err := os.WriteFile(p, []byte(report), 0o644); err != nil {
			t.Error(err)
		}
	}
	for _, dst := range []netip.Addr{addr, addr6} {
		if r, out := c.PingFrom(client, dst, 3, "0.2"); !r.OK {
			t.Errorf("node-c's pod → the migrated VM %s: %d of 3 answered\n%s", dst, r.Recv, out)
		}
	}
	if len(results) == runs {
		checkNotices(t, a, b, cn)
	}
}

// checkNotices: every node took live-migration notices of the test's
// migrations (each is the source or a third node of some), and none came
// under another key; what each counted is logged.
func checkNotices(t *testing.T, nodes ...*cluster.RealNode) {
	t.Helper()
	for _, n := range nodes {
		m, err := cluster.Metrics(n.NS)
		if err != nil {
			t.Errorf("%s: vmlaned's metrics: %v", n.Name, err)
			continue
		}
		counts := map[string]float64{}
		for _, result := range []string{"taken", "refused", "bad", "lapsed"} {
			counts[result] = m[`vmlane_peer_notices_total{result="`+result+`"}`]
		}
		t.Logf("%s: live-migration notices: %v", n.Name, counts)
		if counts["taken"] < 1 {
			t.Errorf("%s took no live-migration notice: its routes moved by the claims alone (counts %v)", n.Name, counts)
		}
		if counts["bad"] > 0 {
			t.Errorf("%s got %v notices it could not open: do the nodes have one key?", n.Name, counts["bad"])
		}
	}
}

// vmAddrs is the migrating VM's addresses and MAC.
type vmAddrs struct {
	v4, v6 netip.Addr
	mac    string
}

// migrator runs the migrations of TestVMLiveMigration.
type migrator struct {
	t       *testing.T
	dir     string
	vm      vmAddrs
	third   *cluster.RealNode
	clients map[string]cluster.KubePod // by node
}

// migrationPings is how many pings each vantage sends per migration, every
// 10 ms: 1.5 s before the migration starts, the migration (under a
// second here), and the rest after it.
const migrationPings = 700

// migrate moves the VM's guest from pod on from to a new pod on to, with
// every vantage pinging throughout; ok is false when something failed
// that leaves no guest to migrate again.
func (m *migrator) migrate(n int, pod string, from, to *cluster.RealNode) (r cluster.MigrationRun, ok bool) {
	t := m.t
	r = cluster.MigrationRun{N: n, From: from.Name, To: to.Name, Pod: fmt.Sprintf("vmmig-%d", n), Loss: map[string]time.Duration{}}
	addr, addr6 := m.vm.v4, m.vm.v6
	nodes := []*cluster.RealNode{from, to, m.third}

	// The target: the same VM on another node while the source runs. It
	// gets the VM's addresses and MAC; the claim and the routes stay.
	dst := c.StartVMPod(t, r.Pod, to.Name, cluster.VMGuest{VM: "vmmig", Migration: m.dir, Incoming: true, MigrationFrom: pod})
	if dst.IP != addr || dst.IP6 != addr6 {
		t.Errorf("migration %d: %s on %s: pod IPs %s %s, want the VM's %s %s", n, r.Pod, to.Name, dst.IP, dst.IP6, addr, addr6)
		return r, false
	}
	time.Sleep(time.Second) // a claims pass or two on every node
	if out, _ := c.Kubectl("get", "vmclaim", "vmmig", "-o", "jsonpath={.status.node} {.status.pod}"); out != from.Name+" default/"+pod {
		t.Errorf("migration %d: VMClaim default/vmmig before it: %q, want it still with the source, %s default/%s", n, out, from.Name, pod)
	}
	// Every node routes the VM to the source, the target too: a host
	// route onto its bridge, where no guest runs yet, would blackhole its
	// own pods.
	for _, nd := range []*cluster.RealNode{to, m.third} {
		if via := routeVia(t, nd, addr); via != from.IP.String() {
			t.Errorf("migration %d: %s routes %s via %s before it, want the source %s (%s)", n, nd.Name, addr, via, from.Name, from.IP)
		}
	}

	// The migration's way: the source QEMU's stream goes to a socket of
	// the host, over TCP from the source node's address to the target's,
	// and into the target QEMU's incoming socket.
	proxy, err := cluster.MigrationProxy(from, to, filepath.Join(m.dir, fmt.Sprintf("proxy-%d.sock", n)), filepath.Join(m.dir, r.Pod+".in"))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	qmp, err := cluster.DialQMP(filepath.Join(m.dir, pod+".qmp"), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer qmp.Close()
	// From node-c's pod: a TCP connection to the guest's web server,
	// opened now and its request finished after the migration. (One
	// connection across all the migrations outlives the web server's
	// 60 s wait for a request.)
	tcp := make(chan string, 1)
	fifo := fmt.Sprintf("/tmp/go-%d", n)
	go func() {
		out, err := c.Exec(m.clients["node-c"], "sh", "-c", fmt.Sprintf(`rm -f %[1]s && mkfifo %[1]s && (printf 'GET /cgi-bin/whoami HTTP/1.0\r\n'; cat %[1]s; sleep 3) | nc %[2]s 80`, fifo, addr))
		tcp <- fmt.Sprintf("%s (err %v)", out, err)
	}()

	type vantage struct {
		name string
		pod  cluster.KubePod
		dst  netip.Addr
		out  chan string
	}
	var vs []vantage
	for _, nd := range []string{"node-a", "node-b", "node-c"} {
		for _, d := range []netip.Addr{addr, addr6} {
			v := vantage{nd + " " + cluster.Family(d), m.clients[nd], d, make(chan string, 1)}
			vs = append(vs, v)
			go func() {
				out, _ := c.Exec(v.pod, cluster.PingArgs(v.dst, migrationPings)...)
				v.out <- out
			}()
		}
	}
	time.Sleep(1500 * time.Millisecond)
	// The switch's clock: the guest's first frame on the target's bridge,
	// and the VM's /32 routed the new way in each kernel after it.
	var clockNodes []cluster.ClockNode
	for _, nd := range nodes {
		moved := func(a netip.Addr, r netlink.Route) bool {
			via := to.IP
			if a.Is6() {
				via = to.IP6
			}
			return r.Gw != nil && r.Gw.Equal(via.AsSlice())
		}
		if nd == to {
			moved = func(_ netip.Addr, r netlink.Route) bool { return r.Gw == nil }
		}
		clockNodes = append(clockNodes, cluster.ClockNode{Name: nd.Name, NS: nd.NS.Path, Moved: moved})
	}
	clock := cluster.StartMigrationClock(t, to.NS.Path, m.vm.mac, []netip.Addr{addr, addr6}, clockNodes)

	tqmp, err := cluster.DialQMP(filepath.Join(m.dir, r.Pod+".qmp"), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer tqmp.Close()
	st, err := cluster.Migrate(qmp, tqmp, "unix:"+filepath.Join(m.dir, fmt.Sprintf("proxy-%d.sock", n)))
	r.MigrationStatus = st
	if err != nil {
		t.Fatalf("migration %d: %v", n, err)
	}
	// Routes on every node: the others via the target, the target onto
	// its bridge (its host route, or at home its pod subnet's).
	for _, d := range []netip.Addr{addr, addr6} {
		targetIP := to.IP
		if d.Is6() {
			targetIP = to.IP6
		}
		for _, nd := range nodes {
			want := targetIP.String()
			if nd == to {
				want = "dev "
			}
			cluster.WaitFor(t, 30*time.Second, fmt.Sprintf("migration %d: %s routes %s the new way (%s)", n, nd.Name, d, want), func() (bool, string) {
				via := routeVia(t, nd, d)
				return strings.HasPrefix(via, want), via
			})
		}
	}
	if out, _ := c.Kubectl("get", "vmclaim", "vmmig", "-o", "jsonpath={.status.node} {.status.pod}"); out != to.Name+" default/"+r.Pod {
		t.Errorf("migration %d: VMClaim default/vmmig after it: %q, want %s default/%s", n, out, to.Name, r.Pod)
	}
	// The TCP connection finishes its request and gets the answer.
	client := m.clients["node-c"]
	if out, err := c.Exec(client, "sh", "-c", fmt.Sprintf(`printf '\r\n' > %s`, fifo)); err != nil {
		t.Errorf("migration %d: finishing the request: %v\n%s", n, err, out)
	}
	select {
	case out := <-tcp:
		if !strings.Contains(out, "200 OK") || !strings.Contains(out, "\n"+client.IP.String()) {
			t.Errorf("migration %d: the TCP connection opened before it: want 200 OK and %s (no NAT) after it, got\n%s", n, client.IP, out)
		}
	case <-time.After(time.Minute):
		t.Errorf("migration %d: the TCP connection opened before it did not finish", n)
	}
	r.Clocked(clock)
	ok = true
	for _, v := range vs {
		out := <-v.out
		err := r.Pinged(v.name, out, migrationPings)
		if r.Loss[v.name] > 50*cluster.MigrationPingInterval {
			t.Logf("migration %d: %s: the longest gap began at seq %d", n, v.name, cluster.GapStart(out, migrationPings))
		}
		if err != nil {
			ok = false
			t.Errorf("migration %d: %v (to %s)", n, err, v.dst)
			for _, nd := range []*cluster.RealNode{from, to} {
				for _, cmd := range [][]string{{"ip", "neigh", "show", "dev", "vmlane0"}, {"ip", "-6", "neigh", "show", "dev", "vmlane0"}, {"ip", "route", "get", v.dst.String()}, {"bridge", "fdb", "show", "br", "vmlane0"}} {
					o, _ := nd.Run("", cmd...)
					t.Logf("%s: %v:\n%s", nd.Name, cmd, o)
				}
			}
			o, _ := c.Exec(v.pod, "ip", "-6", "neigh")
			o4, _ := c.Exec(v.pod, "ip", "neigh")
			t.Logf("%s: ip neigh:\n%s%s", v.pod.Name, o4, o)
		}
	}

	// KubeVirt deletes the source's pod once the migration is done.
	if out, err := c.Kubectl("delete", "pod", pod, "--wait=true", "--timeout=90s"); err != nil {
		t.Fatal(out, err)
	}
	if from.Name == "node-a" {
		if l := vmLease(t, from, "default/vmmig"); l.State != leases.StateHeld {
			t.Errorf("migration %d: node-a's lease of the VM after the source's pod went: %+v, want held for the VM away from home", n, l)
		}
	}
	time.Sleep(time.Second)
	if out, _ := c.Kubectl("get", "vmclaim", "vmmig", "-o", "jsonpath={.status.node} {.status.pod}"); out != to.Name+" default/"+r.Pod {
		t.Errorf("migration %d: VMClaim default/vmmig after the source's pod went: %q, want %s default/%s", n, out, to.Name, r.Pod)
	}
	return r, ok
}

// routeVia is where n routes addr: the gateway, or "dev NAME" for a route
// on a link.
func routeVia(t *testing.T, n *cluster.RealNode, addr netip.Addr) string {
	r := cluster.RouteTo(t, n.NS, addr)
	switch {
	case r.Gw != nil:
		return r.Gw.String()
	case r.LinkIndex == 0:
		return ""
	}
	return fmt.Sprintf("dev %d", r.LinkIndex)
}

//go:build e2e

package realnode

import (
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmlane/vmlane/e2e/cluster"
	"github.com/vmlane/vmlane/internal/antispoof"
	"github.com/vmlane/vmlane/leases"
)

func podCIDR(t *testing.T, node string) netip.Prefix {
	t.Helper()
	n, err := c.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := netip.ParsePrefix(n.Spec.PodCIDR)
	if err != nil {
		t.Fatalf("node %s podCIDR %q: %v", node, n.Spec.PodCIDR, err)
	}
	return p
}

// TestDaemonSetSetsUpEveryNode: `kubectl apply -k` of the manifests (with
// the image swapped) is all it took: on every node install-cni put the
// plugin in /opt/cni/bin, vmlaned wrote both conflists, made the bridge,
// routed the other nodes' podCIDRs (from node IPAM) and cleared
// NetworkUnavailable, and its probes pass (the pods are Ready).
func TestDaemonSetSetsUpEveryNode(t *testing.T) {
	for _, n := range c.RealNodes {
		for _, f := range []string{"/opt/cni/bin/vmlane", "/etc/cni/net.d/10-vmlane.conflist", cluster.VMConfDir + "/99-vmlane-vm.conflist"} {
			if _, err := os.Stat(n.File(f)); err != nil {
				t.Errorf("%s: %s: %v", n.Name, f, err)
			}
		}
		if out, err := n.NS.Run("ip", "-o", "addr", "show", "dev", "vmlane0"); err != nil || !strings.Contains(out, podCIDR(t, n.Name).Addr().Next().String()) {
			t.Errorf("%s: bridge vmlane0 without its gateway address: %s %v", n.Name, out, err)
		}
		if got := strings.Count(n.Routes(), "\n") + 1; n.Routes() == "" || got != len(c.RealNodes)-1 {
			t.Errorf("%s: vmlane routes:\n%s\nwant one to each other node", n.Name, n.Routes())
		}
		node, err := c.Client.CoreV1().Nodes().Get(context.Background(), n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var cleared bool
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeNetworkUnavailable && cond.Status == corev1.ConditionFalse {
				cleared = true
			}
		}
		if !cleared {
			t.Errorf("%s: NetworkUnavailable not False: %+v", n.Name, node.Status.Conditions)
		}
	}
	out, _ := c.Kubectl("get", "nodes", "-o", "wide")
	t.Logf("kubectl get nodes:\n%s", out)
}

// TestOldContainerd: node-c runs Debian's containerd 1.6, whose libcni
// reads cniVersion alone and rejects 1.1.0 results; the conflists'
// cniVersion 1.0.0 (with cniVersions for newer runtimes) gives its pods
// their addresses.
func TestOldContainerd(t *testing.T) {
	node, err := c.Client.CoreV1().Nodes().Get(context.Background(), "node-c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := node.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(v, "containerd://1.6.") {
		t.Fatalf("node-c runs %s, want containerd 1.6", v)
	}
	cidr := podCIDR(t, "node-c")
	if len(web["node-c"]) != 2 {
		t.Fatalf("node-c has %d web pods, want 2", len(web["node-c"]))
	}
	for _, p := range web["node-c"] {
		if !cidr.Contains(p.IP) {
			t.Errorf("%s on containerd 1.6: pod IP %s outside node-c's podCIDR %s", p.Name, p.IP, cidr)
		}
	}
}

// TestPlainPodsAcrossNodes: the Deployment's pods got their addresses
// from vmlane through containerd's own CNI calls (`kubectl get pods -o
// wide` shows them, each in its node's podCIDR), and reach each other
// across nodes by pod IP, seen with their own addresses: no NAT.
func TestPlainPodsAcrossNodes(t *testing.T) {
	out, _ := c.Kubectl("get", "pods", "-o", "wide")
	t.Logf("kubectl get pods -o wide:\n%s", out)
	for node, ps := range web {
		cidr := podCIDR(t, node)
		for _, p := range ps {
			if !cidr.Contains(p.IP) {
				t.Errorf("%s on %s: IP %s outside the node's podCIDR %s", p.Name, node, p.IP, cidr)
			}
		}
	}
	for _, pair := range [][2]string{{"node-a", "node-b"}, {"node-b", "node-c"}, {"node-c", "node-a"}} {
		src, dst := web[pair[0]][0], web[pair[1]][1]
		if r, out := c.PingFrom(src, dst.IP, 3, "0.2"); !r.OK {
			t.Errorf("%s (%s) → %s (%s): %d of 3 pings answered\n%s", src.Name, pair[0], dst.Name, pair[1], r.Recv, out)
		}
		if seen, err := c.WhoAmIFrom(src, dst.IP.String()); err != nil || seen != src.IP.String() {
			t.Errorf("%s → %s: seen as %q (%v), want %s", src.Name, dst.Name, seen, err, src.IP)
		}
	}
}

// TestClusterIPService: a pod reaches the web Service's ClusterIP (kube-
// proxy's iptables DNAT), served by pods on other nodes as well as its own,
// and every backend sees the pod's own address; except the pod itself,
// when the Service picks it (hairpin): kube-proxy masquerades that, so it
// sees its node's address on the bridge.
func TestClusterIPService(t *testing.T) {
	svc, err := c.Client.CoreV1().Services("default").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodeOf := map[string]string{}
	for node, ps := range web {
		for _, p := range ps {
			nodeOf[p.Name] = node
		}
	}
	src := web["node-a"][0]
	gateway := podCIDR(t, "node-a").Addr().Next()
	remote := 0
	for i := 0; i < 30 && remote < 2; i++ {
		out, err := c.Exec(src, "timeout", "10", "wget", "-q", "-O", "-", "http://"+svc.Spec.ClusterIP+"/cgi-bin/whoserves")
		seen, backend, _ := strings.Cut(strings.TrimSpace(out), " ")
		want := src.IP.String()
		if backend == src.Name {
			want = gateway.String()
		}
		if err != nil || seen != want {
			t.Fatalf("request %d to Service web (%s) from %s: seen as %q by %q (%v), want %s", i, svc.Spec.ClusterIP, src.Name, seen, backend, err, want)
		}
		if n := nodeOf[backend]; n != "" && n != "node-a" {
			remote++
		}
	}
	if remote < 2 {
		t.Errorf("30 requests to Service web from node-a: %d served by pods on other nodes, want 2 or more", remote)
	}
}

// TestVMPods: the VM pods' IPs, as `kubectl get pod` shows them, are the
// addresses their guests got by DHCP; the leases are bound; vm-a pinged
// vm-b across nodes from inside its guest; plain pods on other nodes
// reach both VMs, which see them with their own addresses.
func TestVMPods(t *testing.T) {
	for name, p := range vms {
		log, _ := c.Kubectl("logs", name)
		got, ok := cluster.GuestAddr(log)
		if !ok || got != p.IP {
			t.Errorf("%s: kubectl shows pod IP %s, the guest got %v by DHCP\n%s", name, p.IP, got, log)
		}
		snap, err := leases.Read(c.RealNode(p.Node).File("/var/lib/vmlane/leases.json"))
		if err != nil {
			t.Fatal(err)
		}
		var bound bool
		for _, l := range snap.Leases() {
			if l.IP == p.IP && l.State == leases.StateBound && l.Pod.Name == name {
				bound = true
			}
		}
		if !bound {
			t.Errorf("%s: no bound lease for %s on %s: %+v", name, p.IP, p.Node, snap.Leases())
		}
	}
	log, _ := c.Kubectl("logs", "vm-a")
	if !strings.Contains(log, "VMLANE-PING ok target="+vms["vm-b"].IP.String()) {
		t.Errorf("vm-a's guest did not ping vm-b (%s) across nodes:\n%s", vms["vm-b"].IP, log)
	}
	for _, pair := range [][2]string{{"node-c", "vm-a"}, {"node-b", "vm-a"}, {"node-a", "vm-b"}} {
		src, vm := web[pair[0]][0], vms[pair[1]]
		if r, out := c.PingFrom(src, vm.IP, 3, "0.2"); !r.OK {
			t.Errorf("%s → %s: %d of 3 pings answered\n%s", src.Name, vm.Name, r.Recv, out)
		}
		if seen, err := c.WhoAmIFrom(src, vm.IP.String()); err != nil || seen != src.IP.String() {
			t.Errorf("%s → %s: seen as %q (%v), want %s", src.Name, vm.Name, seen, err, src.IP)
		}
	}
	out, _ := c.Kubectl("get", "pods", "-l", "app=vm", "-o", "wide")
	t.Logf("VM pods:\n%s", out)
}

// podCIDR6 is node's IPv6 podCIDR, as the controller manager allocated it.
func podCIDR6(t *testing.T, node string) netip.Prefix {
	t.Helper()
	n, err := c.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range n.Spec.PodCIDRs {
		if p, err := netip.ParsePrefix(s); err == nil && p.Addr().Is6() {
			return p
		}
	}
	t.Fatalf("node %s has no IPv6 podCIDR: %v", node, n.Spec.PodCIDRs)
	return netip.Prefix{}
}

// TestDualStack: the controller manager gave every node an IPv6 podCIDR
// too; containerd's CNI calls got each plain pod an IPv6 address in it
// (kubectl shows both pod IPs, containerd 1.6 and 2.x alike); plain pods
// reach each other across nodes by IPv6 without NAT and the outside over
// IPv6 masqueraded as their node; the VM pods' guests got their pod's IPv6
// address by DHCPv6, and plain pods reach them by it.
func TestDualStack(t *testing.T) {
	for node, ps := range web {
		cidr := podCIDR6(t, node)
		for _, p := range ps {
			if !cidr.Contains(p.IP6) {
				t.Errorf("%s on %s: IPv6 %v outside the node's IPv6 podCIDR %s", p.Name, node, p.IP6, cidr)
			}
		}
	}
	for _, pair := range [][2]string{{"node-a", "node-b"}, {"node-b", "node-c"}, {"node-c", "node-a"}} {
		src, dst := web[pair[0]][0], web[pair[1]][1]
		if r, out := c.PingFrom(src, dst.IP6, 3, "0.2"); !r.OK {
			t.Errorf("%s (%s) → %s (%s) over IPv6: %d of 3 pings answered\n%s", src.Name, pair[0], dst.Name, pair[1], r.Recv, out)
		}
		if seen, err := c.WhoAmIFrom(src, dst.IP6.String()); err != nil || seen != src.IP6.String() {
			t.Errorf("%s → %s over IPv6: seen as %q (%v), want %s", src.Name, dst.Name, seen, err, src.IP6)
		}
	}
	src := web["node-b"][0]
	if seen, err := c.WhoAmIFrom(src, cluster.OutsideIP6.String()); err != nil || seen != "fd99::12" {
		t.Errorf("%s → outside over IPv6: seen as %q (%v), want node-b's fd99::12", src.Name, seen, err)
	}
	for name, p := range vms {
		log, _ := c.Kubectl("logs", name)
		if got, ok := cluster.GuestAddr6(log); !ok || got != p.IP6 {
			t.Errorf("%s: kubectl shows IPv6 pod IP %v, the guest got %v by DHCPv6\n%s", name, p.IP6, got, log)
		}
		if seen, err := c.WhoAmIFrom(src, p.IP6.String()); err != nil || seen != src.IP6.String() {
			t.Errorf("%s → %s over IPv6: seen as %q (%v), want %s", src.Name, name, seen, err, src.IP6)
		}
	}
}

// TestAntiSpoofOnRealNodes: on every node, the plugin that containerd ran
// and the DaemonSet's vmlaned (unprivileged, with CAP_NET_ADMIN) keep the
// anti-spoofing table whole, with exactly one entry per CNI lease: its
// bridge port, MAC and addresses.
func TestAntiSpoofOnRealNodes(t *testing.T) {
	for _, n := range c.RealNodes {
		tb := antispoof.Table{NetNS: n.NS.Path}
		if err := tb.Verify(); err != nil {
			t.Errorf("%s: anti-spoofing table: %v", n.Name, err)
		}
		ports, err := tb.Ports()
		if err != nil {
			t.Fatal(err)
		}
		var got, want []string
		for _, p := range ports {
			got = append(got, p.String())
		}
		snap, err := leases.Read(n.File("/var/lib/vmlane/leases.json"))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range snap.Leases() {
			if l.Source != leases.SourceCNI || l.State == leases.StateHeld {
				continue // a held VM lease has no port until its VM's next pod
			}
			if l.BridgePort == "" {
				t.Errorf("%s: lease %s of %s/%s names no bridge port", n.Name, l.IP, l.Pod.Namespace, l.Pod.Name)
			}
			mac, _ := net.ParseMAC(l.MAC)
			want = append(want, antispoof.Port{Name: l.BridgePort, MAC: mac, IP: l.IP, IP6: l.IP6}.String())
		}
		sort.Strings(got)
		sort.Strings(want)
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s: anti-spoofing ports:\n%s\nwant one per CNI lease:\n%s", n.Name, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if len(want) == 0 {
			t.Errorf("%s: no CNI lease: the test checks nothing there", n.Name)
		}
	}
}

// leaseLines are a node's leases, one line each, without the expiry that
// a guest's renewal moves.
func leaseLines(t *testing.T, n *cluster.RealNode) []string {
	snap, err := leases.Read(n.File("/var/lib/vmlane/leases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range snap.Leases() {
		out = append(out, l.IP.String()+" "+l.MAC+" "+string(l.State)+" "+l.Pod.Namespace+"/"+l.Pod.Name)
	}
	sort.Strings(out)
	return out
}

// TestDaemonSetUpgradeUnderTraffic rolls the DaemonSet to a new image tag
// while a plain pod pings each VM across nodes: no ping is lost, no
// vmlane route is withdrawn even for a moment (ip monitor), and routes
// and leases are the same afterwards.
func TestDaemonSetUpgradeUnderTraffic(t *testing.T) {
	const next = "ghcr.io/vmlane/vmlane:e2e-next"
	for _, n := range c.RealNodes {
		if _, err := n.Ctr("images", "tag", "--force", "ghcr.io/vmlane/vmlane:e2e", next); err != nil {
			t.Fatalf("tagging %s: %v", next, err)
		}
	}
	underTraffic(t, "the roll to "+next, func() {
		if out, err := c.Kubectl("-n", "vmlane-system", "set", "image", "ds/vmlane", "vmlaned="+next, "install-cni="+next); err != nil {
			t.Fatal(out, err)
		}
	})
}

// underTraffic runs change, which rolls the vmlane DaemonSet, and waits for
// the rollout, while plain pods ping the VMs across nodes every 200 ms for
// 60 s (longer than a roll takes). It fails t for a lost ping, for a
// vmlane route deleted even for a moment (`ip monitor route` on every
// node), for routes or leases that changed, and unless every vmlane pod is
// Ready after.
func underTraffic(t *testing.T, what string, change func()) {
	t.Helper()
	routes, leaseBefore := map[string]string{}, map[string][]string{}
	for _, n := range c.RealNodes {
		routes[n.Name], leaseBefore[n.Name] = n.Routes(), leaseLines(t, n)
	}
	// Route deletions while the roll runs, on every node.
	var monitors []*exec.Cmd
	var outs []*strings.Builder
	for _, n := range c.RealNodes {
		var b strings.Builder
		m := n.NS.Command("ip", "-o", "monitor", "route")
		m.Stdout = &b
		if err := m.Start(); err != nil {
			t.Fatal(err)
		}
		monitors, outs = append(monitors, m), append(outs, &b)
	}
	const count = 300
	var wg sync.WaitGroup
	results := make([]string, 2)
	got := make([]cluster.PingResult, 2)
	for i, pair := range [][2]string{{"node-c", "vm-a"}, {"node-a", "vm-b"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], results[i] = c.PingFrom(web[pair[0]][1], vms[pair[1]].IP, count, "0.2")
		}()
	}
	time.Sleep(3 * time.Second)
	began := time.Now()
	change()
	if out, err := c.Kubectl("-n", "vmlane-system", "rollout", "status", "ds/vmlane", "--timeout=3m"); err != nil {
		t.Fatalf("rollout: %v\n%s", err, out)
	}
	t.Logf("%s: the DaemonSet rolled on %d nodes in %s", what, len(c.RealNodes), time.Since(began).Round(time.Second))
	wg.Wait()
	for _, m := range monitors {
		m.Process.Kill()
		m.Wait()
	}
	for i, r := range results {
		if !got[i].OK {
			t.Errorf("pings during %s: %d of %d answered\n%s", what, got[i].Recv, count, r)
		}
	}
	t.Logf("%s: pings answered %d of %d and %d of %d", what, got[0].Recv, count, got[1].Recv, count)
	for i, n := range c.RealNodes {
		for _, line := range strings.Split(outs[i].String(), "\n") {
			if strings.HasPrefix(line, "Deleted") && strings.Contains(line, "proto 77") {
				t.Errorf("%s: a vmlane route went away during %s: %s", n.Name, what, line)
			}
		}
		if got := n.Routes(); got != routes[n.Name] {
			t.Errorf("%s: routes changed:\nbefore:\n%s\nafter:\n%s", n.Name, routes[n.Name], got)
		}
		if got := leaseLines(t, n); strings.Join(got, "\n") != strings.Join(leaseBefore[n.Name], "\n") {
			t.Errorf("%s: leases changed:\nbefore:\n%s\nafter:\n%s", n.Name, strings.Join(leaseBefore[n.Name], "\n"), strings.Join(got, "\n"))
		}
	}
	cluster.WaitFor(t, time.Minute, "vmlane pods ready after "+what, func() (bool, string) {
		return c.PodsReady("vmlane-system", "app.kubernetes.io/name=vmlane", len(c.RealNodes))
	})
}

// TestRollBackAndForward: the DaemonSet rolled back to the previous
// version of vmlane (a commit of this repository's history until there is
// a release: Makefile's PREVIOUS, built by internal/testing/previous with
// its own image build), a VM (vmlane.io/vm) started under it, and the
// DaemonSet rolled forward again, each roll while plain pods ping the VMs
// (underTraffic: no ping lost, no route withdrawn, routes and leases
// unchanged): the downgrade keeps what this version wrote, the upgrade
// what the previous one wrote, the VM's VMClaim included, and the VM's
// guest answers after it. The tests after it run on the version rolled
// forward to: a VM's restart keeps its addresses.
func TestRollBackAndForward(t *testing.T) {
	prev := os.Getenv("VMLANE_PREVIOUS_IMAGE")
	if prev == "" {
		t.Fatal("VMLANE_PREVIOUS_IMAGE is not set: make previous builds the previous version's image (make test and make e2e-real set it)")
	}
	const previous = "ghcr.io/vmlane/vmlane:previous"
	for _, n := range c.RealNodes {
		if _, err := n.Ctr("images", "import", prev); err != nil {
			t.Fatalf("importing %s: %v", prev, err)
		}
	}
	current := c.MustKubectl(t, "-n", "vmlane-system", "get", "ds/vmlane", "-o", "jsonpath={.spec.template.spec.containers[0].image}")
	roll := func(what, image string) {
		t.Helper()
		underTraffic(t, what, func() {
			if out, err := c.Kubectl("-n", "vmlane-system", "set", "image", "ds/vmlane", "vmlaned="+image, "install-cni="+image); err != nil {
				t.Fatal(out, err)
			}
		})
	}
	roll("the roll back to the previous version", previous)

	// A VM, and its claim, made by the previous version.
	addr := c.StartVMPod(t, "rollvm-1", "node-a", cluster.VMGuest{VM: "rollvm"}).IP
	c.WaitGuest(t, "rollvm-1")
	t.Cleanup(func() {
		c.Kubectl("delete", "pod", "rollvm-1", "--wait=true", "--timeout=60s")
		releaseVM(t, "rollvm")
	})
	claims := func() string {
		return c.MustKubectl(t, "get", "vmclaims", "-A", "-o", "custom-columns=NS:.metadata.namespace,NAME:.metadata.name,IPV4:.status.ipv4,IPV6:.status.ipv6,MAC:.status.mac,NODE:.status.node,HOME:.status.home,POD:.status.pod")
	}
	cluster.WaitFor(t, 30*time.Second, "VMClaim default/rollvm", func() (bool, string) {
		out := claims()
		return strings.Contains(out, "rollvm"), out
	})
	before := claims()

	roll("the roll forward to this version", current)
	if got := claims(); got != before {
		t.Errorf("after the roll forward, the VMClaims:\n%s\nwant them as the previous version wrote them:\n%s", got, before)
	}
	// The VM's guest still answers at its address, from another node.
	if r, out := c.PingFrom(web["node-b"][0], addr, 5, "0.2"); !r.OK {
		t.Errorf("after the roll forward, rollvm's guest at %s: %d of 5 answered\n%s", addr, r.Recv, out)
	}
}

// TestDelAfterPodCIDRChange: a pod deleted after its node's conflist moved
// to another subnet (what vmlaned writes after a podCIDR change) still goes
// away, and its lease is released. Found on this stack: containerd's DEL
// failed with "lease file belongs to another subnet" and the pod stayed
// Terminating for good.
func TestDelAfterPodCIDRChange(t *testing.T) {
	n := c.RealNode("node-a")
	conf := n.File("/etc/cni/net.d/10-vmlane.conflist")
	orig, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	old := podCIDR(t, "node-a")
	moved := strings.ReplaceAll(string(orig), old.String(), "10.244.99.0/24")
	moved = strings.ReplaceAll(moved, `"`+old.Addr().Next().String()+`"`, `"10.244.99.1"`)
	if moved == string(orig) {
		t.Fatalf("conflist does not name %s:\n%s", old, orig)
	}
	// As vmlaned writes it: a temporary file renamed over the old one,
	// from inside the node, where containerd's config watch sees it.
	install := func(data string) error {
		_, err := n.Run(data, "sh", "-c", "cat >/etc/cni/net.d/.vmlane-e2e.tmp && mv /etc/cni/net.d/.vmlane-e2e.tmp /etc/cni/net.d/10-vmlane.conflist")
		return err
	}
	restore := func() {
		if err := install(string(orig)); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(restore)
	if err := install(moved); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // containerd reloads it
	victim := web["node-a"][0]
	if out, err := c.Kubectl("delete", "pod", victim.Name, "--wait=false"); err != nil {
		t.Fatal(out, err)
	}
	cluster.WaitFor(t, 2*time.Minute, victim.Name+" gone after its DEL under another subnet's conflist", func() (bool, string) {
		for _, p := range c.Pods(t, "default", "app=web") {
			if p.Name == victim.Name {
				out, _ := c.Kubectl("get", "pod", victim.Name, "-o", "wide")
				return false, out + "\n" + n.Log("containerd.log", 5)
			}
		}
		return true, ""
	})
	for _, l := range leaseLines(t, n) {
		if strings.HasPrefix(l, victim.IP.String()+" ") {
			t.Errorf("%s's lease is still there after its DEL: %s", victim.Name, l)
		}
	}
	// The conflist back as vmlaned wrote it; the Deployment's new pod
	// comes up on it (its ADDs meanwhile failed: the file still holds the
	// old subnet's leases, which vmlane never drops silently).
	restore()
	cluster.WaitFor(t, 3*time.Minute, "Deployment web ready again", func() (bool, string) {
		return c.PodsReady("default", "app=web", 2*len(c.RealNodes))
	})
}

// TestStatusGatesNodeReadiness runs last: it breaks node-b's network.
// containerd 2.x calls CNI STATUS every few seconds; vmlane's STATUS fails
// while the bridge is missing, which turns the node NotReady (the kubelet
// reports NetworkReady=false with vmlane's message). Once vmlaned has made
// the bridge again (here: its pod restarted) the node is Ready again.
func TestStatusGatesNodeReadiness(t *testing.T) {
	n := c.RealNode("node-b")
	n.NS.MustRun(t, "ip", "link", "del", "vmlane0")
	ready := func(want corev1.ConditionStatus) (bool, string) {
		node, err := c.Client.CoreV1().Nodes().Get(context.Background(), "node-b", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == want, string(cond.Status) + " " + cond.Message
			}
		}
		return false, "no Ready condition"
	}
	var msg string
	cluster.WaitFor(t, 2*time.Minute, "node-b NotReady once STATUS fails", func() (bool, string) {
		ok, m := ready(corev1.ConditionFalse)
		msg = m
		return ok, m
	})
	if !strings.Contains(msg, "vmlane0") {
		t.Errorf("node-b NotReady, but not for vmlane's STATUS: %s", msg)
	}
	t.Logf("node-b without its bridge: %s", msg)
	if out, err := c.Kubectl("-n", "vmlane-system", "delete", "pod", "-l", "app.kubernetes.io/name=vmlane",
		"--field-selector", "spec.nodeName=node-b", "--wait=false"); err != nil {
		t.Fatal(out, err)
	}
	cluster.WaitFor(t, 3*time.Minute, "node-b Ready again once vmlaned made the bridge", func() (bool, string) {
		return ready(corev1.ConditionTrue)
	})
}

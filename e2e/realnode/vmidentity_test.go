//go:build e2e

package realnode

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmlane/vmlane/e2e/cluster"
	"github.com/vmlane/vmlane/internal/antispoof"
	"github.com/vmlane/vmlane/leases"
)

// TestVMIdentityRestart: a VM's pod, annotated vmlane.io/vm and attached
// by containerd through the plain conflist, is deleted and made again on
// the same node; the new pod's guest gets the same IPv4, IPv6 and MAC by
// DHCP and DHCPv6. A plain pod made in between never gets them; a second
// live pod of the VM on the node is refused with an error that names the
// VM and its pod. `vmlanectl claims release`, run in the node's vmlane pod,
// gives the addresses back at the end.
func TestVMIdentityRestart(t *testing.T) {
	node := c.RealNode("node-a")
	t.Cleanup(func() {
		for _, p := range []string{"vmid-1", "vmid-2", "vmid-3", "vmid-between"} {
			c.Kubectl("delete", "pod", p, "--ignore-not-found", "--wait=true", "--timeout=60s")
		}
	})
	// How long the VM's claim takes to reach the API after its ADD wrote
	// the lease: watched from both ends every 20 ms while the pod starts.
	claimLag := make(chan time.Duration, 1)
	go func() {
		var leaseAt time.Time
		for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if leaseAt.IsZero() {
				if hasVMLease(node, "default/vmid") {
					leaseAt = time.Now()
				}
				continue
			}
			if out, err := c.Kubectl("get", "vmclaims", "vmid", "-o", "name"); err == nil && strings.TrimSpace(out) != "" {
				claimLag <- time.Since(leaseAt)
				return
			}
		}
		claimLag <- -1
	}()
	first := c.StartVMPod(t, "vmid-1", "node-a", cluster.VMGuest{VM: "vmid"})
	addr := c.WaitGuest(t, "vmid-1")
	log, _ := c.Kubectl("logs", "vmid-1")
	addr6, _ := cluster.GuestAddr6(log)
	if addr != first.IP || addr6 != first.IP6 {
		t.Fatalf("vmid-1: pod IPs %s %s, the guest got %s %s", first.IP, first.IP6, addr, addr6)
	}
	lease := waitVMLease(t, node, "default/vmid", leases.StateBound)
	if !lease.VM || lease.Pod.Name != "vmid-1" {
		t.Fatalf("vmid-1's lease: %+v, want a VM's, of pod vmid-1", lease)
	}
	mac := lease.MAC
	switch lag := <-claimLag; {
	case lag < 0:
		t.Errorf("no VMClaim default/vmid within 3 minutes of its lease")
	case lag > 2*time.Second:
		t.Errorf("VMClaim default/vmid reached the API %s after its lease, want under 2 s", lag)
	default:
		t.Logf("VMClaim default/vmid in the API %s after the ADD wrote its lease (polled every 20 ms)", lag.Round(10*time.Millisecond))
	}
	want := fmt.Sprintf("%s/%d %s/%d %s node-a default/vmid-1", addr, podCIDR(t, "node-a").Bits(), addr6, podCIDR6(t, "node-a").Bits(), mac)
	cluster.WaitFor(t, 10*time.Second, "VMClaim default/vmid says "+want, func() (bool, string) {
		out, _ := c.Kubectl("get", "vmclaim", "vmid", "-o", "jsonpath={.status.ipv4} {.status.ipv6} {.status.mac} {.status.node} {.status.pod}")
		return out == want, out
	})

	if out, err := c.Kubectl("delete", "pod", "vmid-1", "--wait=true", "--timeout=90s"); err != nil {
		t.Fatal(out, err)
	}
	if l := vmLease(t, node, "default/vmid"); l.State != leases.StateHeld || l.IP != addr || l.IP6 != addr6 || l.MAC != mac {
		t.Fatalf("after vmid-1 went: %+v, want the VM's addresses held", l)
	}
	cluster.WaitFor(t, 10*time.Second, "VMClaim default/vmid held, without a pod", func() (bool, string) {
		out, _ := c.Kubectl("get", "vmclaim", "vmid", "-o", "jsonpath={.status.node} {.status.pod} {.status.heldUntil}")
		return strings.HasPrefix(out, "node-a  20"), out
	})

	// A plain pod in between, on the same node.
	between := plainPod(t, "vmid-between", "node-a")
	if between.IP == addr || between.IP6 == addr6 {
		t.Fatalf("plain pod vmid-between got the held VM's address: %s %s", between.IP, between.IP6)
	}

	startVMWith(t, "vmid-2", "node-a", "vmid", addr, addr6)
	if l := waitVMLease(t, node, "default/vmid", leases.StateBound); l.MAC != mac || l.Pod.Name != "vmid-2" {
		t.Errorf("vmid-2's lease: %+v, want bound, MAC %s", l, mac)
	}

	// A second live pod of the VM on the node: its sandbox's ADD fails,
	// naming the VM and the pod that holds it.
	c.Apply(t, `apiVersion: v1
kind: Pod
metadata: {name: vmid-3, namespace: default, labels: {app: vmid-3}, annotations: {vmlane.io/vm: vmid}}
spec:
  nodeName: node-a
  terminationGracePeriodSeconds: 1
  containers:
    - {name: sleep, image: vmlane.test/busybox:e2e, imagePullPolicy: Never, command: ["sleep", "3600"]}
`)
	cluster.WaitFor(t, 2*time.Minute, "vmid-3's sandbox refused, naming the VM and vmid-2", func() (bool, string) {
		out, _ := c.Kubectl("get", "events", "--field-selector", "involvedObject.name=vmid-3", "-o", "custom-columns=MSG:.message")
		return strings.Contains(out, "default/vmid") && strings.Contains(out, "default/vmid-2"), out
	})

	if out, err := c.Kubectl("delete", "pod", "vmid-2", "vmid-3", "--wait=true", "--timeout=90s"); err != nil {
		t.Fatal(out, err)
	}
	ds := vmlanePod(t, "node-a")
	out, err := c.Exec(ds, "vmlanectl", "claims", "list")
	if err != nil || !strings.Contains(out, "default/vmid") || !strings.Contains(out, "held") {
		t.Errorf("vmlanectl claims list on node-a: %v\n%s", err, out)
	}
	out, err = c.Exec(ds, "vmlanectl", "claims", "release", "default/vmid")
	if err != nil || !strings.Contains(out, "released VM default/vmid: "+addr.String()) {
		t.Errorf("vmlanectl claims release: %v\n%s", err, out)
	}
	for _, l := range leaseLines(t, node) {
		if strings.HasPrefix(l, addr.String()+" ") {
			t.Errorf("the VM's lease is still there after its release: %s", l)
		}
	}
	cluster.WaitFor(t, 10*time.Second, "VMClaim default/vmid deleted after the release", func() (bool, string) {
		out, err := c.Kubectl("get", "vmclaims", "-o", "name")
		return err == nil && !strings.Contains(out, "vmid"), out
	})
}

// hasVMLease reports whether n's lease file has an attached (not held)
// lease of vm: a pod of the VM was ADDed there.
func hasVMLease(n *cluster.RealNode, vm string) bool {
	snap, err := leases.Read(n.File("/var/lib/vmlane/leases.json"))
	if err != nil {
		return false
	}
	for _, l := range snap.Leases() {
		if l.VMName == vm && l.State != leases.StateHeld {
			return true
		}
	}
	return false
}

// startVMWith starts pod name of VM vm on node and checks that the pod
// and its guest (by DHCP and DHCPv6) have the VM's addresses.
func startVMWith(t *testing.T, name, node, vm string, addr, addr6 netip.Addr) {
	t.Helper()
	p := c.StartVMPod(t, name, node, cluster.VMGuest{VM: vm})
	if p.IP != addr || p.IP6 != addr6 {
		t.Fatalf("%s on %s: pod IPs %s %s, want the VM's %s %s", name, node, p.IP, p.IP6, addr, addr6)
	}
	if got := c.WaitGuest(t, name); got != addr {
		t.Fatalf("%s's guest got %s by DHCP on %s, want the VM's %s", name, got, node, addr)
	}
	log, _ := c.Kubectl("logs", name)
	if got, _ := cluster.GuestAddr6(log); got != addr6 {
		t.Errorf("%s's guest got %s by DHCPv6 on %s, want the VM's %s", name, got, node, addr6)
	}
}

// waitVMLease waits until node's lease of VM vm is in state, and returns it.
func waitVMLease(t *testing.T, n *cluster.RealNode, vm string, state leases.State) leases.Lease {
	t.Helper()
	var l leases.Lease
	cluster.WaitFor(t, 30*time.Second, vm+"'s lease "+string(state), func() (bool, string) {
		l = vmLease(t, n, vm)
		return l.State == state, fmt.Sprintf("%+v", l)
	})
	return l
}

// vmLease is node's lease of VM vm ("NAMESPACE/NAME").
func vmLease(t *testing.T, n *cluster.RealNode, vm string) leases.Lease {
	t.Helper()
	snap, err := leases.Read(n.File("/var/lib/vmlane/leases.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range snap.Leases() {
		if l.VMName == vm {
			return l
		}
	}
	t.Fatalf("%s has no lease of VM %s: %+v", n.Name, vm, snap.Leases())
	return leases.Lease{}
}

// TestVMMove: a VM's pod on node-a is deleted and made again on node-b,
// then on node-c with node-c's vmlaned killed during the move.
// The guest gets the same addresses there by DHCP and DHCPv6 (node-b
// serves an address of node-a's subnet), every other node routes the VM's
// /32 and /128 to node-b, and plain pods on node-a, node-b and node-c
// reach it by IPv4 and IPv6 without NAT. node-a no longer answers for it:
// its lease there is held (kept from its other pods) and its anti-spoofing
// table has no port with the VM's address; node-b's has.
func TestVMMove(t *testing.T) {
	a, b := c.RealNode("node-a"), c.RealNode("node-b")
	t.Cleanup(func() {
		c.Kubectl("delete", "pod", "vmmove-1", "vmmove-2", "vmmove-3", "vmmove-client-a", "vmmove-client-b", "vmmove-client-c", "--ignore-not-found", "--wait=true", "--timeout=60s")
		releaseVM(t, "vmmove")
	})
	c.StartVMPod(t, "vmmove-1", "node-a", cluster.VMGuest{VM: "vmmove"})
	addr := c.WaitGuest(t, "vmmove-1")
	log, _ := c.Kubectl("logs", "vmmove-1")
	addr6, _ := cluster.GuestAddr6(log)
	mac := waitVMLease(t, a, "default/vmmove", leases.StateBound).MAC
	if out, err := c.Kubectl("delete", "pod", "vmmove-1", "--wait=true", "--timeout=90s"); err != nil {
		t.Fatal(out, err)
	}

	converged := watchMove(t, b, "default/vmmove", addr, addr6, "10.99.0.12", "fd99::12", c.RealNode("node-a"), c.RealNode("node-c"))
	startVMWith(t, "vmmove-2", "node-b", "vmmove", addr, addr6)
	if l := waitVMLease(t, b, "default/vmmove", leases.StateBound); l.MAC != mac || !l.Home.Contains(addr) {
		t.Errorf("node-b's lease %+v, want the VM's MAC %s and its home subnet", l, mac)
	}
	cluster.WaitFor(t, 10*time.Second, "VMClaim default/vmmove on node-b", func() (bool, string) {
		out, _ := c.Kubectl("get", "vmclaim", "vmmove", "-o", "jsonpath={.status.node} {.status.pod}")
		return out == "node-b default/vmmove-2", out
	})
	// Every node but node-b routes the VM's addresses to node-b.
	for _, n := range []string{"node-a", "node-c"} {
		rn := c.RealNode(n)
		cluster.WaitFor(t, 10*time.Second, n+" routes "+addr.String()+" and "+addr6.String()+" via node-b", func() (bool, string) {
			r4, r6 := rn.Routes(), rn.Routes6()
			return strings.Contains(r4, addr.String()+" via 10.99.0.12") && strings.Contains(r6, addr6.String()+" via fd99::12"), r4 + r6
		})
	}
	if d := <-converged; d < 0 {
		t.Error("routes to the moved VM not seen on node-a and node-c")
	} else {
		t.Logf("VM default/vmmove moved to node-b: its /32 and /128 via node-b on node-a and node-c %s after node-b's ADD wrote its lease (polled every 20 ms)", d.Round(10*time.Millisecond))
	}

	// A plain pod of each node, made now: an earlier test replaced one of
	// node-a's web pods, and another deleted node-b's bridge under its
	// web pods.
	plain := map[string]cluster.KubePod{}
	for _, node := range []string{"node-a", "node-b", "node-c"} {
		plain[node] = plainPod(t, "vmmove-client-"+node[len(node)-1:], node)
	}
	for _, node := range []string{"node-a", "node-b", "node-c"} {
		src := plain[node]
		for _, dst := range []netip.Addr{addr, addr6} {
			want := src.IP
			if dst.Is6() {
				want = src.IP6
			}
			if r, out := c.PingFrom(src, dst, 3, "0.2"); !r.OK {
				t.Errorf("%s (%s) → the moved VM %s: %d of 3 pings answered\n%s", src.Name, node, dst, r.Recv, out)
				diagnose(t, src, b)
			}
			if seen, err := c.WhoAmIFrom(src, dst.String()); err != nil || seen != want.String() {
				t.Errorf("%s (%s) → the moved VM %s: seen as %q (%v), want %s (no NAT)", src.Name, node, dst, seen, err, want)
			}
		}
	}

	// node-a holds the addresses for the VM and answers for them no more.
	if l := vmLease(t, a, "default/vmmove"); l.State != leases.StateHeld || l.IP != addr {
		t.Errorf("node-a's lease of the VM: %+v, want held", l)
	}
	for _, n := range []*cluster.RealNode{a, b} {
		ports, err := antispoof.Table{NetNS: n.NS.Path}.Ports()
		if err != nil {
			t.Fatal(err)
		}
		has := slices.ContainsFunc(ports, func(p antispoof.Port) bool { return p.IP == addr && p.IP6 == addr6 })
		if has != (n == b) {
			t.Errorf("%s's anti-spoofing table has a port for %s: %v, want %v", n.Name, addr, has, n == b)
		}
	}

	// On to node-c, whose vmlaned is SIGKILLed the moment the ADD wrote
	// the VM's lease there: once the kubelet has restarted it, the
	// cluster converges, and no node holds the address for anyone else.
	cn := c.RealNode("node-c")
	if out, err := c.Kubectl("delete", "pod", "vmmove-2", "--wait=true", "--timeout=90s"); err != nil {
		t.Fatal(out, err)
	}
	killed := make(chan error, 1)
	go func() {
		for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if hasVMLease(cn, "default/vmmove") {
				_, err := cn.Signal("vmlaned", syscall.SIGKILL)
				killed <- err
				return
			}
		}
		killed <- fmt.Errorf("no lease of default/vmmove on node-c")
	}()
	startVMWith(t, "vmmove-3", "node-c", "vmmove", addr, addr6)
	if err := <-killed; err != nil {
		t.Fatalf("killing vmlaned on node-c during the move: %v", err)
	}
	cluster.WaitFor(t, 2*time.Minute, "VMClaim default/vmmove on node-c after node-c's vmlaned restarted", func() (bool, string) {
		out, _ := c.Kubectl("get", "vmclaim", "vmmove", "-o", "jsonpath={.status.node} {.status.pod}")
		return out == "node-c default/vmmove-3", out
	})
	for _, n := range []*cluster.RealNode{a, b} {
		cluster.WaitFor(t, time.Minute, n.Name+" routes the VM via node-c", func() (bool, string) {
			return strings.Contains(n.Routes(), addr.String()+" via 10.99.0.13") && strings.Contains(n.Routes6(), addr6.String()+" via fd99::13"), n.Routes() + n.Routes6()
		})
	}
	// The address is attached on node-c only; node-a (home) and node-b
	// (where it last ran) hold it for the VM, nothing else has it.
	for _, n := range []*cluster.RealNode{a, b, cn} {
		snap, err := leases.Read(n.File("/var/lib/vmlane/leases.json"))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range snap.Leases() {
			if l.IP != addr && l.IP6 != addr6 {
				continue
			}
			if l.VMName != "default/vmmove" || (n == cn) == (l.State == leases.StateHeld) {
				t.Errorf("%s: lease %s %s %s of %q: want the VM's, attached on node-c only", n.Name, l.IP, l.IP6, l.State, l.VMName)
			}
		}
	}
	if r, out := c.PingFrom(plain["node-a"], addr, 3, "0.2"); !r.OK {
		t.Errorf("node-a's pod → the VM on node-c: %d of 3 pings answered\n%s", r.Recv, out)
	}
}

// watchMove measures a move: from when node to's lease file has an
// attached lease of vm to when every node of others routes addr and addr6
// via (via4, via6). It sends -1 if that takes over 3 minutes.
func watchMove(t *testing.T, to *cluster.RealNode, vm string, addr, addr6 netip.Addr, via4, via6 string, others ...*cluster.RealNode) <-chan time.Duration {
	out := make(chan time.Duration, 1)
	go func() {
		var added time.Time
		for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if added.IsZero() {
				if hasVMLease(to, vm) {
					added = time.Now()
				}
				continue
			}
			all := true
			for _, n := range others {
				all = all && strings.Contains(n.Routes(), addr.String()+" via "+via4) && strings.Contains(n.Routes6(), addr6.String()+" via "+via6)
			}
			if all {
				out <- time.Since(added)
				return
			}
		}
		out <- -1
	}()
	return out
}

// plainPod makes a busybox pod named name on node and waits for its IPs.
func plainPod(t *testing.T, name, node string) cluster.KubePod {
	t.Helper()
	c.Apply(t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: default, labels: {app: %s}}
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  containers:
    - {name: sleep, image: vmlane.test/busybox:e2e, imagePullPolicy: Never, command: ["sleep", "3600"]}
`, name, name, node))
	var p cluster.KubePod
	cluster.WaitFor(t, 2*time.Minute, "plain pod "+name+" with its IPs", func() (bool, string) {
		for _, q := range c.Pods(t, "default", "app="+name) {
			p = q
			return q.IP.IsValid() && q.IP6.IsValid(), fmt.Sprint(q)
		}
		return false, "no pod"
	})
	return p
}

// releaseVM gives back VM default/NAME's addresses on every node, as a user
// does once a VM is deleted for good: `vmlanectl claims release` on the
// node that last ran it, then on its home node, which held them while it
// ran elsewhere (and, until the claim is gone, holds them again and may
// publish a claim of its own: hence the rounds). It waits until the claim
// and every route to the VM are gone, so that the tests after it see the
// cluster as it was.
func releaseVM(t *testing.T, name string) {
	t.Helper()
	cluster.WaitFor(t, time.Minute, "VM default/"+name+" released on every node, its claim and routes gone", func() (bool, string) {
		for _, node := range []string{"node-c", "node-b", "node-a"} {
			if ds := vmlanePod(t, node); ds.Name != "" {
				c.Exec(ds, "vmlanectl", "claims", "release", "default/"+name)
			}
		}
		time.Sleep(500 * time.Millisecond) // a claims pass on each node
		if out, err := c.Kubectl("get", "vmclaims", "-o", "name"); err != nil || strings.Contains(out, "/"+name+"\n") || strings.HasSuffix(out, "/"+name) {
			return false, "claims: " + out
		}
		for _, node := range []string{"node-a", "node-b", "node-c"} {
			n := c.RealNode(node)
			if snap, err := leases.Read(n.File("/var/lib/vmlane/leases.json")); err == nil {
				for _, l := range snap.Leases() {
					if l.VMName == "default/"+name {
						return false, fmt.Sprintf("%s: lease %s %s", node, l.IP, l.State)
					}
				}
			}
			// A host route has no prefix length: one to a VM away
			// from home.
			if r := n.Routes() + n.Routes6(); hostRoute.MatchString(r) {
				return false, node + " routes: " + r
			}
		}
		return true, ""
	})
}

var hostRoute = regexp.MustCompile(`(?m)^[0-9a-f.:]+ via`)

// vmlanePod is node's vmlane DaemonSet pod.
func vmlanePod(t *testing.T, node string) cluster.KubePod {
	for _, p := range c.Pods(t, "vmlane-system", "app.kubernetes.io/name=vmlane") {
		if p.Node == node {
			return p
		}
	}
	return cluster.KubePod{}
}

// diagnose logs what the node that holds a VM and a pod that could not
// reach it know of each other.
func diagnose(t *testing.T, src cluster.KubePod, n *cluster.RealNode) {
	for _, argv := range [][]string{
		{"ping", "-c", "1", "-W", "1", src.IP.String()},
		{"ip", "neigh"}, {"ip", "-6", "neigh"}, {"ip", "route"}, {"ip", "-6", "route"},
		{"sh", "-c", "ip route get " + src.IP.String() + "; ip -d link show vmlane0; bridge link"},
		{"sh", "-c", "grep . /proc/sys/net/ipv4/conf/vmlane0/* /proc/sys/net/ipv4/conf/all/* 2>/dev/null | grep -E 'arp|redirect|rp_filter|accept_local|route_localnet|forwarding'"},
		{"sh", "-c", "for f in /proc/sys/net/ipv4/conf/vmlane0/proxy_arp /proc/sys/net/ipv4/neigh/vmlane0/proxy_delay /proc/sys/net/ipv6/conf/vmlane0/proxy_ndp /proc/sys/net/ipv6/neigh/vmlane0/proxy_delay /proc/sys/net/ipv4/conf/vmlane0/send_redirects /proc/sys/net/bridge/bridge-nf-call-iptables; do echo $f $(cat $f); done"},
		{"sh", "-c", "iptables-save -c | grep -v '^#' | grep -v ' \\[0:0\\]' | head -80"},
		{"sh", "-c", "ip6tables-save -c | grep -v '^#' | grep -v ' \\[0:0\\]' | head -40"},
	} {
		out, err := n.Run("", argv...)
		t.Logf("%s: %v: %v\n%s", n.Name, argv, err, out)
	}
	for _, argv := range [][]string{{"ip", "neigh"}, {"ip", "route"}, {"ip", "-6", "route"}, {"ip", "-6", "neigh"}, {"sh", "-c", "grep . /proc/sys/net/ipv4/conf/eth0/arp* /proc/sys/net/ipv4/conf/eth0/rp_filter /proc/sys/net/ipv4/conf/all/rp_filter /proc/sys/net/ipv4/conf/eth0/accept_redirects"}} {
		out, err := c.Exec(src, argv...)
		t.Logf("%s: %v: %v\n%s", src.Name, argv, err, out)
	}
}

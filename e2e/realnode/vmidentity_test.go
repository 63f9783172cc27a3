//go:build e2e

package realnode

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vmlane/vmlane/e2e/cluster"
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
				if snap, err := leases.Read(node.File("/var/lib/vmlane/leases.json")); err == nil {
					for _, l := range snap.Leases() {
						if l.VMName == "default/vmid" {
							leaseAt = time.Now()
						}
					}
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
	c.Apply(t, `apiVersion: v1
kind: Pod
metadata: {name: vmid-between, namespace: default, labels: {app: vmid-between}}
spec:
  nodeName: node-a
  terminationGracePeriodSeconds: 1
  containers:
    - {name: sleep, image: vmlane.test/busybox:e2e, imagePullPolicy: Never, command: ["sleep", "3600"]}
`)
	var between cluster.KubePod
	cluster.WaitFor(t, 2*time.Minute, "plain pod vmid-between with its IPs", func() (bool, string) {
		for _, p := range c.Pods(t, "default", "app=vmid-between") {
			between = p
			return p.IP.IsValid() && p.IP6.IsValid(), fmt.Sprint(p)
		}
		return false, "no pod"
	})
	if between.IP == addr || between.IP6 == addr6 {
		t.Fatalf("plain pod vmid-between got the held VM's address: %s %s", between.IP, between.IP6)
	}

	second := c.StartVMPod(t, "vmid-2", "node-a", cluster.VMGuest{VM: "vmid"})
	if second.IP != addr || second.IP6 != addr6 {
		t.Fatalf("vmid-2: pod IPs %s %s, want the VM's %s %s", second.IP, second.IP6, addr, addr6)
	}
	if got := c.WaitGuest(t, "vmid-2"); got != addr {
		t.Errorf("vmid-2's guest got %s by DHCP, want the VM's %s", got, addr)
	}
	log, _ = c.Kubectl("logs", "vmid-2")
	if got, _ := cluster.GuestAddr6(log); got != addr6 {
		t.Errorf("vmid-2's guest got %s by DHCPv6, want the VM's %s", got, addr6)
	}
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
	var ds cluster.KubePod
	for _, p := range c.Pods(t, "vmlane-system", "app.kubernetes.io/name=vmlane") {
		if p.Node == "node-a" {
			ds = p
		}
	}
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

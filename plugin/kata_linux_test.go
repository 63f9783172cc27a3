package plugin_test

import (
	"strings"
	"testing"

	"github.com/vmlane/vmlane/internal/antispoof"
	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/plugin"
)

// kataConnect is what Kata Containers does to a pod's network after the
// CNI ADD, from kata-containers 7c6ba40 (src/runtime/virtcontainers/
// network_linux.go): scanEndpointsInNs takes every interface of the pod
// that has an address (one without is skipped: no network for the VM);
// setupTCFiltering, its default interworking model, makes tap0_kata
// (network.go: "tap%d_kata"), gives it the veth's MTU, adds an ingress
// qdisc to both (addQdiscIngress: QdiscAdd, which fails when the veth has
// one already) and redirects each to the other (addRedirectTCFilter); the
// guest NIC gets the veth's MAC. It returns the ingress qdisc error, if
// any, as tc printed it.
func kataConnect(t *testing.T, pod *netnstest.NS, veth string) string {
	t.Helper()
	addrs := pod.MustRun(t, "ip", "-o", "-4", "addr", "show", "dev", veth)
	if !strings.Contains(addrs, "inet ") {
		t.Fatalf("Kata would skip %s, which has no address:\n%s", veth, addrs)
	}
	mtu := sysNet(t, pod, veth, "mtu")
	pod.MustRun(t, "ip", "tuntap", "add", "tap0_kata", "mode", "tap")
	pod.MustRun(t, "ip", "link", "set", "tap0_kata", "mtu", mtu, "up")
	pod.MustRun(t, "tc", "qdisc", "add", "dev", "tap0_kata", "ingress")
	if out, err := pod.Command("tc", "qdisc", "add", "dev", veth, "ingress").CombinedOutput(); err != nil {
		return strings.TrimSpace(string(out))
	}
	for _, p := range [][2]string{{veth, "tap0_kata"}, {"tap0_kata", veth}} {
		pod.MustRun(t, "tc", "filter", "add", "dev", p[0], "parent", "ffff:", "protocol", "all",
			"u32", "match", "u8", "0", "0", "action", "mirred", "egress", "redirect", "dev", p[1])
	}
	return ""
}

// TestKataPlainMode: Kata needs vmlane's plain mode. The pod interface
// has the lease's address, MAC and default route, which Kata hands the
// guest, and no ingress qdisc, so Kata's own goes on; the bridge's
// anti-spoofing holds the port to that MAC and address, which are the
// guest's. VM mode would leave Kata nothing: no address (the interface is
// skipped) and an ingress qdisc of vmlane's (Kata's QdiscAdd fails).
func TestKataPlainMode(t *testing.T) {
	n := newNode(t, "10.250.46.0/24")
	pod := netnstest.New(t, "kata")
	list := n.conf("1.1.0", false, nil)
	rt := podRT("kata1", pod)
	r, err := n.add(list, rt)
	if err != nil {
		t.Fatal(err)
	}
	if msg := kataConnect(t, pod, "eth0"); msg != "" {
		t.Fatalf("Kata's ingress qdisc on eth0: %s", msg)
	}
	ls := n.leaseList()
	if len(ls) != 1 {
		t.Fatalf("leases %+v", ls)
	}
	if mac := sysNet(t, pod, "eth0", "address"); mac != ls[0].MAC {
		t.Errorf("eth0's MAC, which Kata gives the guest, is %s; the lease's %s", mac, ls[0].MAC)
	}
	if route := pod.MustRun(t, "ip", "-4", "route", "show", "default"); !strings.Contains(route, "via 10.250.46.1 dev eth0") {
		t.Errorf("default route, which Kata copies to the guest: %q", route)
	}
	if r.IPs[0].Address.IP.String() != ls[0].IP.String() {
		t.Errorf("result IP %s, lease %s", r.IPs[0].Address.IP, ls[0].IP)
	}
	guarded := guardedPort(t, n, ls[0].BridgePort)
	if guarded == "" || !strings.Contains(guarded, ls[0].MAC) || !strings.Contains(guarded, ls[0].IP.String()) {
		t.Errorf("anti-spoofing of %s: %q, want the lease's MAC and address", ls[0].BridgePort, guarded)
	}
	// Kata takes its devices down before the runtime's DEL.
	pod.MustRun(t, "ip", "link", "del", "tap0_kata")
	pod.MustRun(t, "tc", "qdisc", "del", "dev", "eth0", "ingress")
	if err := n.del(list, rt); err != nil {
		t.Fatal(err)
	}
	n.assertClean(pod)

	vmPod := netnstest.New(t, "kata-vm")
	vmList := n.conf("1.1.0", true, nil)
	vrt := podRT("kata2", vmPod)
	if _, err := n.add(vmList, vrt); err != nil {
		t.Fatal(err)
	}
	if addrs := vmPod.MustRun(t, "ip", "-o", "-4", "addr", "show", "dev", "eth0"); strings.Contains(addrs, "inet ") {
		t.Errorf("VM mode's eth0 has an address: %s", addrs)
	}
	// tc's words for EEXIST under NLM_F_EXCL, which Kata's QdiscAdd sets.
	if out, err := vmPod.Command("tc", "qdisc", "add", "dev", "eth0", "ingress").CombinedOutput(); err == nil || !strings.Contains(string(out), "Exclusivity flag on") {
		t.Errorf("Kata's ingress qdisc over VM mode's: %v %s, want it refused", err, out)
	}
	if err := n.del(vmList, vrt); err != nil {
		t.Fatal(err)
	}
}

// guardedPort is the anti-spoofing entry of the port, as text.
func guardedPort(t *testing.T, n *node, port string) string {
	t.Helper()
	ports, err := antispoof.Table{NetNS: n.ns.Path, Name: plugin.AntiSpoofTable(plugin.DefaultBridge)}.Ports()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ports {
		if p.Name == port {
			return p.String()
		}
	}
	return ""
}

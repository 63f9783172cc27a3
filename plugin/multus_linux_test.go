package plugin_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/vmlane/vmlane/internal/testing/netnstest"
)

// multusRT is the RuntimeConf Multus builds for a delegate, as read from
// multus-cni 95a0932 (v4.2): pkg/types/conf.go newCNIRuntimeConf and
// createRuntimeConf (Args in that order, IgnoreUnknown "true"), with the
// ifname pkg/multus/multus.go getIfname gives the delegate at position
// idx of the pod's list, the cluster network being 0: net1, net2…
// Capability args carry only what the network selection element asks for
// (mac, ips, portMappings…): never the pod's annotations, so a secondary
// vmlane network is a VM network by "vm": true in its config, not by
// vmlane.io/vm.
func multusRT(id string, pod *netnstest.NS, ifName string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: id,
		NetNS:       pod.Path,
		IfName:      ifName,
		Args: [][2]string{
			{"IgnoreUnknown", "true"},
			{"K8S_POD_NAMESPACE", "default"},
			{"K8S_POD_NAME", "pod-" + id},
			{"K8S_POD_INFRA_CONTAINER_ID", id},
			{"K8S_POD_UID", "uid-" + id},
		},
	}
}

// network is a second vmlane network on n's node: its own bridge, subnet
// and lease file, as a NetworkAttachmentDefinition would give it.
func (n *node) network(subnet string) *node {
	return &node{t: n.t, ns: n.ns, cni: n.cni, subnet: subnet, leases: filepath.Join(n.t.TempDir(), "leases.json")}
}

// TestMultusTwoNICs is a VM pod with two secondary vmlane networks, as
// Multus attaches them (pkg/multus/multus.go CmdAdd → DelegateAdd →
// conflistAdd, one AddNetworkList per delegate; DelegateDel → conflistDel
// on the way out). Multus never calls CHECK, GC or STATUS for them:
// CmdCheck goes to the delegates of its own config (the cluster network),
// CmdGC and CmdStatus to the first of those only.
//
// Each attachment gets a TAP named after its ifname (net1 → tap1, net2 →
// tap2), its own address and MAC, and DEL of one leaves the other whole.
func TestMultusTwoNICs(t *testing.T) {
	red := newNode(t, "10.250.40.0/24")
	blue := red.network("10.250.41.0/24")
	pod := netnstest.New(t, "pod")
	redList := red.conf("1.1.0", true, map[string]any{"bridge": "vmlred"})
	blueList := blue.conf("1.1.0", true, map[string]any{"bridge": "vmlblue"})
	rt1, rt2 := multusRT("c1", pod, "net1"), multusRT("c1", pod, "net2")

	r1, err := red.add(redList, rt1)
	if err != nil {
		t.Fatalf("ADD net1: %v", err)
	}
	r2, err := blue.add(blueList, rt2)
	if err != nil {
		t.Fatalf("ADD net2: %v", err)
	}
	tap1, tap2 := lastIf(r1), lastIf(r2)
	if tap1.Name != "tap1" || tap2.Name != "tap2" {
		t.Fatalf("TAPs %q and %q, want tap1 and tap2", tap1.Name, tap2.Name)
	}
	if tap1.Mac == tap2.Mac {
		t.Errorf("both TAPs carry the guest MAC %s", tap1.Mac)
	}
	if ip1, ip2 := r1.IPs[0].Address.IP.String(), r2.IPs[0].Address.IP.String(); !strings.HasPrefix(ip1, "10.250.40.") || !strings.HasPrefix(ip2, "10.250.41.") {
		t.Errorf("addresses %s and %s, want one of each network", ip1, ip2)
	}
	for tap, to := range map[string]string{"tap1": "net1", "tap2": "net2"} {
		out := pod.MustRun(t, "tc", "filter", "show", "dev", tap, "ingress")
		if !strings.Contains(out, "to device "+to+")") {
			t.Errorf("%s redirects elsewhere than %s:\n%s", tap, to, out)
		}
	}

	if err := red.del(redList, rt1); err != nil {
		t.Fatalf("DEL net1: %v", err)
	}
	if links := pod.MustRun(t, "ip", "-o", "link", "show"); strings.Contains(links, "net1") || strings.Contains(links, "tap1:") || !strings.Contains(links, "tap2:") {
		t.Errorf("after DEL net1, the pod has:\n%s", links)
	}
	// Not a Multus call: the test's own look at net2, which must be whole.
	if err := blue.check(blueList, rt2); err != nil {
		t.Errorf("CHECK net2 after DEL net1: %v", err)
	}
	if ls := blue.leaseList(); len(ls) != 1 || ls[0].MAC != tap2.Mac {
		t.Errorf("net2's leases after DEL net1: %+v", ls)
	}
	if err := blue.del(blueList, rt2); err != nil {
		t.Fatalf("DEL net2: %v", err)
	}
	red.assertClean(pod)
	blue.assertClean()
}

// TestMultusTapCollision: two networks whose configs name the same TAP
// (tapName), in one pod. The second ADD is refused naming the TAP, both
// ifnames and the field; Multus then calls DEL for the attachment it
// could not add (CmdAdd → delPlugins from the failed one down), which
// must leave the first attachment's TAP alone. A link vmlane did not make
// is refused too.
func TestMultusTapCollision(t *testing.T) {
	red := newNode(t, "10.250.42.0/24")
	blue := red.network("10.250.43.0/24")
	pod := netnstest.New(t, "pod")
	redList := red.conf("1.1.0", true, map[string]any{"bridge": "vmlred", "tapName": "vmtap"})
	blueList := blue.conf("1.1.0", true, map[string]any{"bridge": "vmlblue", "tapName": "vmtap"})
	rt1, rt2 := multusRT("c1", pod, "net1"), multusRT("c1", pod, "net2")

	if _, err := red.add(redList, rt1); err != nil {
		t.Fatalf("ADD net1: %v", err)
	}
	_, err := blue.add(blueList, rt2)
	if err == nil {
		t.Fatal("ADD net2 with net1's tapName succeeded")
	}
	for _, want := range []string{"TAP vmtap", "on net2", "attachment on net1", `tapName "vmtap"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("ADD net2: %v; want it to say %q", err, want)
		}
	}
	if err := blue.del(blueList, rt2); err != nil {
		t.Fatalf("DEL net2 after its failed ADD: %v", err)
	}
	if err := red.check(redList, rt1); err != nil {
		t.Errorf("CHECK net1 after net2's failed ADD and DEL: %v", err)
	}
	if ls := blue.leaseList(); len(ls) != 0 {
		t.Errorf("net2 holds leases after its failed ADD: %+v", ls)
	}
	if err := red.del(redList, rt1); err != nil {
		t.Fatal(err)
	}
	red.assertClean(pod)

	// Someone else's TAP where net1's would go.
	pod.MustRun(t, "ip", "tuntap", "add", "tap1", "mode", "tap")
	_, err = red.add(red.conf("1.1.0", true, map[string]any{"bridge": "vmlred"}), rt1)
	if err == nil || !strings.Contains(err.Error(), "TAP tap1 for the attachment on net1 is already in the pod: it is a link vmlane did not make") ||
		!strings.Contains(err.Error(), "derived from ifname net1") {
		t.Errorf("ADD over a foreign tap1 = %v; want it refused and named", err)
	}
	if out := pod.MustRun(t, "ip", "-o", "link", "show", "tap1"); out == "" {
		t.Error("the foreign tap1 is gone")
	}
	if ls := red.leaseList(); len(ls) != 0 {
		t.Errorf("leases after the refused ADD: %+v", ls)
	}
}

// lastIf is a VM attachment's TAP: the result's last interface.
func lastIf(r *current.Result) *current.Interface { return r.Interfaces[len(r.Interfaces)-1] }

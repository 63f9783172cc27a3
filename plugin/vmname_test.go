package plugin

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// annotated is the runtimeConfig containerd and CRI-O pass a conflist that
// declares the pod-annotations capability, for a pod of VM name.
func annotated(name string) map[string]any {
	return map[string]any{"runtimeConfig": map[string]any{
		PodAnnotationsCapability: map[string]string{VMAnnotation: name, "other": "x"},
	}}
}

// A pod annotated vmlane.io/vm is attached in VM mode through the plain
// network's config, and its addresses and MAC are the VM's: its next pod
// gets them back, a plain pod in between never does.
func TestVMAnnotation(t *testing.T) {
	h := newHarness(t, map[string]any{"subnet": "10.244.3.0/29"})
	a, b := att("a"), att("b")
	a.args, b.args = k8sArgs, k8sArgs
	h.mustAdd(a, annotated("vm1"))
	if !h.dp.hasLink(a.netns, "tap0") {
		t.Fatalf("no TAP in the annotated pod:\n%s", strings.Join(h.dp.state(), "\n"))
	}
	h.wantLeases("10.244.3.2 mac=02:76:0a:f4:03:02 reserved cni attachment=a/eth0 netns=/run/netns/a pod=default/web-0 uid=uid-a hostname=web-0 vm=default/vm1")

	// A second live pod of the VM on this node is refused, naming both.
	_, err := h.add(b, annotated("vm1"))
	wantCode(t, err, types.ErrTryAgainLater, "default/vm1", "default/web-0", "a/eth0")

	// DEL without the annotation (a runtime that passes none on DEL)
	// still removes the TAP, and holds the lease for the VM.
	if err := h.del(a, nil); err != nil {
		t.Fatal(err)
	}
	if h.dp.hasLink(a.netns, "tap0") || h.dp.hasLink("", a.veth()) {
		t.Fatalf("DEL left links:\n%s", strings.Join(h.dp.state(), "\n"))
	}
	h.wantLeases("10.244.3.2 mac=02:76:0a:f4:03:02 held cni pod=default/web-0 uid=uid-a hostname=web-0 vm=default/vm1 expires")

	// Plain pods take the rest of the subnet, never the VM's address.
	for _, id := range []string{"p1", "p2", "p3", "p4"} {
		p := att(id)
		if r := h.mustAdd(p, nil); r.IPs[0].Address.IP.String() == "10.244.3.2" {
			t.Fatalf("plain pod %s got the VM's held address", id)
		}
	}
	_, err = h.add(att("p5"), nil)
	wantCode(t, err, types.ErrTryAgainLater, "no free address")

	// The VM's next pod gets its address and MAC back.
	h.mustAdd(b, annotated("vm1"))
	l, ok := h.leaseOf(b)
	if !ok || l.IP.String() != "10.244.3.2" || l.MAC != "02:76:0a:f4:03:02" || l.VMName != "default/vm1" {
		t.Fatalf("the VM's next pod got %+v", l)
	}
	// Its DEL and a GC the runtime runs after it leave the lease held.
	if err := h.del(b, annotated("vm1")); err != nil {
		t.Fatal(err)
	}
	if err := h.other("GC", h.p.GC, b, map[string]any{"cni.dev/valid-attachments": []any{}}); err != nil {
		t.Fatal(err)
	}
	if l, ok := h.leaseOf(b); ok {
		t.Fatalf("the deleted attachment still has %+v", l)
	}
	lines := h.leaseLines()
	if len(lines) != 1 || lines[0] != "10.244.3.2 mac=02:76:0a:f4:03:02 held cni pod=default/web-0 uid=uid-a hostname=web-0 vm=default/vm1 expires" {
		t.Errorf("after GC: %q, want only the VM's held lease (the plain pods were not listed)", lines)
	}
}

// A pod whose VM's other pod left without DEL (its netns is gone, as
// after a node's reboot) takes the VM's lease over.
func TestVMAnnotationStaleHolder(t *testing.T) {
	h := newHarness(t, nil)
	a, b := att("a"), att("b")
	a.args, b.args = k8sArgs, k8sArgs
	h.mustAdd(a, annotated("vm1"))
	h.dp.removeNetns(a.netns)
	h.mustAdd(b, annotated("vm1"))
	l, ok := h.leaseOf(b)
	if !ok || l.IP.String() != "10.244.3.2" {
		t.Fatalf("takeover: %+v", l)
	}
	if _, ok := h.leaseOf(a); ok {
		t.Error("the stale attachment kept a lease")
	}
}

func TestVMAnnotationBadInput(t *testing.T) {
	for _, tc := range []struct {
		name, vm, args string
		extra          map[string]any
		words          []string
	}{
		{name: "invalid name", vm: "My_VM", args: k8sArgs, words: []string{"annotation vmlane.io/vm", `"My_VM"`, "lowercase"}},
		{name: "empty name", vm: "", args: k8sArgs, words: []string{"annotation vmlane.io/vm", `""`}},
		{name: "no namespace", vm: "vm1", args: "K8S_POD_NAME=web-0", words: []string{"annotation vmlane.io/vm", "K8S_POD_NAMESPACE"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			a := att("a")
			a.args = tc.args
			_, err := h.add(a, annotated(tc.vm))
			wantCode(t, err, types.ErrInvalidNetworkConfig, tc.words...)
			h.wantLeases()
		})
	}
	for _, hold := range []any{0, -5, "0s", "-1h", "soon"} {
		h := newHarness(t, map[string]any{"vmHoldTime": hold})
		_, err := h.add(att("a"), nil)
		wantCode(t, err, types.ErrInvalidNetworkConfig, "vmHoldTime")
	}
}

// writeClaims writes the node's copy of the cluster's VMClaims beside the
// harness's lease file.
func (h *harness) writeClaims(body string) {
	h.t.Helper()
	if err := os.WriteFile(filepath.Join(filepath.Dir(h.leaseFile), ClaimsFileName), []byte(body), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// A VM whose claim names another node's addresses moves in: its lease
// holds them outside the node's subnet, the bridge gets a host route to
// each, anti-spoofing lets its port speak with them, and the result names
// its home subnet's gateway. Its DEL removes the routes and holds the
// lease.
func TestVMMovesIn(t *testing.T) {
	h := newHarness(t, nil)
	h.writeClaims(`{"version":1,"claims":[{"vm":"default/vm1","ipv4":"10.244.1.5/24","mac":"02:76:0a:f4:01:05","node":"node-a"},
		{"vm":"default/other","ipv4":"10.244.1.6/24","mac":"02:76:0a:f4:01:06","node":"node-a"}]}`)
	a := att("a")
	a.args = k8sArgs
	r := h.mustAdd(a, annotated("vm1"))
	if got := ipLines(r); !slices.Equal(got, []string{"10.244.1.5/24 gw 10.244.1.1 on 2"}) {
		t.Errorf("result ips %q, want the VM's address in its home subnet", got)
	}
	if tap := r.Interfaces[len(r.Interfaces)-1]; tap.Mac != "02:76:0a:f4:01:05" {
		t.Errorf("TAP MAC %s, want the claim's", tap.Mac)
	}
	st := h.dp.state()
	for _, want := range []string{
		"ip route add 10.244.1.5/32 dev vmlane0 proto 78 scope link",
		"nft add element bridge vmlane addrs { " + a.veth() + " . 02:76:0a:f4:01:05 . 10.244.1.5 }",
	} {
		if !slices.Contains(st, want) {
			t.Errorf("no %q in:\n%s", want, strings.Join(st, "\n"))
		}
	}
	l, ok := h.leaseOf(a)
	if !ok || l.Home.String() != "10.244.1.0/24" || l.VMName != "default/vm1" {
		t.Fatalf("lease %+v, want it moved in from 10.244.1.0/24", l)
	}
	if err := h.del(a, annotated("vm1")); err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(h.dp.state(), func(s string) bool { return strings.HasPrefix(s, "ip route add 10.244.1.5/32") }) {
		t.Errorf("DEL left the host route:\n%s", strings.Join(h.dp.state(), "\n"))
	}
	h.wantLeases("10.244.1.5 mac=02:76:0a:f4:01:05 held cni pod=default/web-0 uid=uid-a hostname=web-0 vm=default/vm1 expires")

	// A VM without a claim gets an address of the node's own subnet.
	b := att("b")
	b.args = k8sArgs
	if r := h.mustAdd(b, annotated("vm2")); r.IPs[0].Address.IP.String() != "10.244.3.2" {
		t.Errorf("a VM without a claim got %s", r.IPs[0].Address.IP)
	}
	// A claims file that does not parse fails the ADD of a VM's pod
	// (its addresses may be in it), not of a plain pod.
	h.writeClaims(`{"version":1,"claims":[`)
	c := att("c")
	c.args = k8sArgs
	_, err := h.add(c, annotated("vm3"))
	wantCode(t, err, types.ErrTryAgainLater, "VM claims", ClaimsFileName)
	h.mustAdd(att("d"), nil)
}

// migrationTarget is annotated for a VM's pod that is the live-migration
// target of the VM's pod source.
func migrationTarget(name, source string) map[string]any {
	return map[string]any{"runtimeConfig": map[string]any{
		PodAnnotationsCapability: map[string]string{VMAnnotation: name, MigrationTargetAnnotation: source},
	}}
}

// TestVMRunningElsewhere: a pod of a VM whose claim names a live pod of it
// on another node (any pod creator of the namespace can annotate one) gets
// the VM's addresses only as that pod's migration target; refused, it
// gets nothing. A claim of a VM held (no pod) or on a node that is down
// needs no signal.
func TestVMRunningElsewhere(t *testing.T) {
	h := newHarness(t, nil)
	h.writeClaims(`{"version":1,"claims":[
		{"vm":"default/vm1","ipv4":"10.244.1.5/24","mac":"02:76:0a:f4:01:05","node":"node-a","pod":"default/vm1-src","live":true},
		{"vm":"default/held","ipv4":"10.244.1.6/24","mac":"02:76:0a:f4:01:06","node":"node-a"},
		{"vm":"default/down","ipv4":"10.244.1.7/24","mac":"02:76:0a:f4:01:07","node":"node-b","pod":"default/down-src"}]}`)
	for i, tc := range []struct {
		name   string
		conf   map[string]any
		refuse []string
	}{
		{"no signal", annotated("vm1"), []string{"VM default/vm1 runs as pod default/vm1-src on node node-a", MigrationTargetAnnotation + `: "vm1-src"`}},
		{"another source", migrationTarget("vm1", "other-pod"), []string{"names \"other-pod\""}},
		{"the source in another namespace", migrationTarget("vm1", "prod/vm1-src"), []string{"names \"prod/vm1-src\""}},
	} {
		a := att(fmt.Sprintf("r%d", i))
		a.args = k8sArgs
		_, err := h.add(a, tc.conf)
		wantCode(t, err, types.ErrInvalidNetworkConfig, append([]string{"annotation vmlane.io/vm"}, tc.refuse...)...)
		if _, ok := h.leaseOf(a); ok {
			t.Errorf("%s: a refused pod has a lease", tc.name)
		}
	}
	h.wantLeases()
	for _, tc := range []struct {
		id   string
		conf map[string]any
		ip   string
	}{
		{"t1", migrationTarget("vm1", "vm1-src"), "10.244.1.5"},
		{"t2", annotated("held"), "10.244.1.6"},
		{"t3", annotated("down"), "10.244.1.7"},
	} {
		a := att(tc.id)
		a.args = k8sArgs
		if r := h.mustAdd(a, tc.conf); r.IPs[0].Address.IP.String() != tc.ip {
			t.Errorf("%s: got %s, want the claim's %s", tc.id, r.IPs[0].Address.IP, tc.ip)
		}
	}
	// "NAMESPACE/NAME" names the source as well.
	h2 := newHarness(t, nil)
	h2.writeClaims(`{"version":1,"claims":[{"vm":"default/vm1","ipv4":"10.244.1.5/24","mac":"02:76:0a:f4:01:05","node":"node-a","pod":"default/vm1-src","live":true}]}`)
	a := att("n")
	a.args = k8sArgs
	h2.mustAdd(a, migrationTarget("vm1", "default/vm1-src"))
}

// A live migration's target whose VM's addresses are of another node's
// subnet gets them, and its port may speak with them, but no host route:
// the guest still runs on the source, and until vmlaned hears it here (and
// the claim names this node) this node's own pods and host must reach it
// through the source, not on a bridge where it does not run yet.
func TestMigrationTargetHasNoHostRouteYet(t *testing.T) {
	h := newHarness(t, nil)
	h.writeClaims(`{"version":1,"claims":[{"vm":"default/vm1","ipv4":"10.244.1.5/24","mac":"02:76:0a:f4:01:05","node":"node-a","pod":"default/vm1-src","live":true}]}`)
	a := att("target")
	a.args = k8sArgs
	r := h.mustAdd(a, migrationTarget("vm1", "vm1-src"))
	if got := ipLines(r); !slices.Equal(got, []string{"10.244.1.5/24 gw 10.244.1.1 on 2"}) {
		t.Errorf("result ips %q, want the VM's address in its home subnet", got)
	}
	st := h.dp.state()
	if slices.ContainsFunc(st, func(s string) bool { return strings.HasPrefix(s, "ip route add 10.244.1.5/32") }) {
		t.Errorf("the migration target has a host route before its guest runs here:\n%s", strings.Join(st, "\n"))
	}
	if want := "nft add element bridge vmlane addrs { " + a.veth() + " . 02:76:0a:f4:01:05 . 10.244.1.5 }"; !slices.Contains(st, want) {
		t.Errorf("no %q in:\n%s", want, strings.Join(st, "\n"))
	}
	if l, ok := h.leaseOf(a); !ok || l.Home.String() != "10.244.1.0/24" {
		t.Errorf("lease %+v, want it moved in from 10.244.1.0/24", l)
	}
}

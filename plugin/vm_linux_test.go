package plugin_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/testvm"
	"github.com/vmlane/vmlane/leases"
)

// TestVMGuestReachesGateway boots a real guest (QEMU, TCG) on the TAP the
// plugin made, with the MAC and address from the ADD result, and has it
// ping the gateway: TAP -> tc redirect -> veth -> bridge and back.
func TestVMGuestReachesGateway(t *testing.T) {
	g := testvm.Need(t, "nsenter")
	n := newNode(t, "10.250.12.0/24")
	pod := netnstest.New(t, "pod")
	list := n.conf("1.1.0", true, nil)
	rt := podRT("vm1", pod)
	r, err := n.add(list, rt)
	if err != nil {
		t.Fatal(err)
	}
	tap := r.Interfaces[len(r.Interfaces)-1] // the TAP comes last
	res, err := g.Run(t.Context(), testvm.Config{
		NetNS:   pod.Path,
		Tap:     tap.Name,
		MAC:     tap.Mac,
		IP:      r.IPs[0].Address.String(),
		Gateway: r.IPs[0].Gateway.String(),
		Timeout: 3 * time.Minute,
	})
	if err != nil {
		t.Fatalf("guest: %v", err)
	}
	if res.Net == nil || !strings.EqualFold(res.Net.MAC, tap.Mac) {
		t.Errorf("guest NIC %+v, want MAC %s", res.Net, tap.Mac)
	}
	if len(res.Pings) != 1 || !res.Pings[0].OK {
		t.Fatalf("guest could not ping the gateway %s through the TAP: %+v (errors %v)", r.IPs[0].Gateway, res.Pings, res.Errors)
	}
	// The bridge learned the guest's MAC on the host veth: the frame
	// crossed the pod netns unchanged.
	fdb := n.ns.MustRun(t, "bridge", "fdb", "show", "br", "vmlane0")
	if !strings.Contains(fdb, strings.ToLower(tap.Mac)) {
		t.Errorf("bridge never saw the guest's MAC %s:\n%s", tap.Mac, fdb)
	}
	t.Logf("guest pinged %s; ready after %s, done after %s", r.IPs[0].Gateway, res.ReadyAfter, res.DoneAfter)
	if err := n.del(list, rt); err != nil {
		t.Fatal(err)
	}
	n.assertClean(pod)
}

// TestAnnotatedPodThroughPlainConflist runs the plugin through libcni as
// containerd and CRI-O call it: the plain network's conflist (vm: false),
// which declares the pod-annotations capability, and the pod's annotations
// as that capability's argument. A pod annotated vmlane.io/vm gets a TAP
// wired to its veth; its DEL holds the VM's addresses and MAC, a plain pod
// made meanwhile does not get them, and the VM's next pod does.
func TestAnnotatedPodThroughPlainConflist(t *testing.T) {
	n := newNode(t, "10.250.13.0/24")
	list := n.conf("1.1.0", false, map[string]any{
		"capabilities": map[string]bool{"mac": true, "ips": true, "io.kubernetes.cri.pod-annotations": true},
	})
	annotated := func(id string, pod *netnstest.NS) *libcni.RuntimeConf {
		rt := podRT(id, pod)
		rt.CapabilityArgs = map[string]any{"io.kubernetes.cri.pod-annotations": map[string]string{
			"vmlane.io/vm": "vm1", "kubectl.kubernetes.io/last-applied-configuration": "{}",
		}}
		return rt
	}
	pod1 := netnstest.New(t, "pod")
	rt1 := annotated("vm1-a", pod1)
	r1, err := n.add(list, rt1)
	if err != nil {
		t.Fatal(err)
	}
	tap := r1.Interfaces[len(r1.Interfaces)-1]
	if tap.Name != "tap0" || tap.Sandbox != pod1.Path {
		t.Fatalf("result interfaces %+v: want the TAP last, in the pod", r1.Interfaces)
	}
	links := pod1.MustRun(t, "ip", "-d", "link", "show", "tap0")
	if !strings.Contains(links, "tun type tap") {
		t.Errorf("tap0 is not a TAP:\n%s", links)
	}
	if f := pod1.MustRun(t, "tc", "filter", "show", "dev", "eth0", "ingress"); !strings.Contains(f, "Redirect to device tap0") {
		t.Errorf("eth0's ingress is not redirected to the TAP:\n%s", f)
	}
	if a := pod1.MustRun(t, "ip", "-o", "-4", "addr", "show", "dev", "eth0"); strings.TrimSpace(a) != "" {
		t.Errorf("the VM pod's eth0 has an address of its own (plain mode?):\n%s", a)
	}
	if err := n.del(list, rt1); err != nil {
		t.Fatal(err)
	}
	ls := n.leaseList()
	if len(ls) != 1 || ls[0].State != leases.StateHeld || ls[0].VMName != "default/vm1" || ls[0].MAC != tap.Mac {
		t.Fatalf("after DEL: %+v, want the VM's lease held", ls)
	}
	plainPod := netnstest.New(t, "pod")
	plain := podRT("plain", plainPod)
	rp, err := n.add(list, plain)
	if err != nil {
		t.Fatal(err)
	}
	if rp.IPs[0].Address.IP.Equal(r1.IPs[0].Address.IP) {
		t.Fatalf("a plain pod got the held VM's address %s", rp.IPs[0].Address.IP)
	}
	pod2 := netnstest.New(t, "pod")
	rt2 := annotated("vm1-b", pod2)
	r2, err := n.add(list, rt2)
	if err != nil {
		t.Fatal(err)
	}
	tap2 := r2.Interfaces[len(r2.Interfaces)-1]
	if !r2.IPs[0].Address.IP.Equal(r1.IPs[0].Address.IP) || tap2.Mac != tap.Mac {
		t.Fatalf("the VM's next pod got %s %s, want %s %s", r2.IPs[0].Address.IP, tap2.Mac, r1.IPs[0].Address.IP, tap.Mac)
	}
	for _, c := range []struct {
		rt  *libcni.RuntimeConf
		pod *netnstest.NS
	}{{rt2, pod2}, {plain, plainPod}} {
		if err := n.del(list, c.rt); err != nil {
			t.Fatal(err)
		}
	}
	if v := n.hostVeths(); len(v) != 0 {
		t.Errorf("host veths left: %v", v)
	}
}

// TestMovedInVMHostRoutes: a VM whose claim (the node's vmclaims.json)
// names addresses of another node's subnets gets them, with a host route
// each onto the bridge (protocol 78), and its DEL removes both routes.
func TestMovedInVMHostRoutes(t *testing.T) {
	n := newNode(t, "10.250.14.0/24")
	list := n.conf("1.1.0", false, map[string]any{
		"subnet6":      "fd00:250:14::/64",
		"capabilities": map[string]bool{"io.kubernetes.cri.pod-annotations": true},
	})
	claims := `{"version":1,"claims":[{"vm":"default/vm1","ipv4":"10.250.15.5/24","ipv6":"fd00:250:15::5/64","mac":"02:76:0a:fa:0f:05","node":"node-x"}]}`
	if err := os.WriteFile(filepath.Join(filepath.Dir(n.leases), "vmclaims.json"), []byte(claims), 0o644); err != nil {
		t.Fatal(err)
	}
	pod := netnstest.New(t, "pod")
	rt := podRT("vm1", pod)
	rt.CapabilityArgs = map[string]any{"io.kubernetes.cri.pod-annotations": map[string]string{"vmlane.io/vm": "vm1"}}
	r, err := n.add(list, rt)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.IPs[0].Address.String(); got != "10.250.15.5/24" {
		t.Errorf("result IP %s, want the claim's", got)
	}
	routes := func() string {
		return n.ns.MustRun(t, "ip", "route", "show", "proto", "78") + n.ns.MustRun(t, "ip", "-6", "route", "show", "proto", "78")
	}
	if got := routes(); !strings.Contains(got, "10.250.15.5 dev vmlane0 scope link") || !strings.Contains(got, "fd00:250:15::5 dev vmlane0") {
		t.Fatalf("host routes after ADD:\n%s", got)
	}
	if err := n.del(list, rt); err != nil {
		t.Fatal(err)
	}
	if got := routes(); strings.TrimSpace(got) != "" {
		t.Errorf("host routes left after DEL:\n%s", got)
	}
}

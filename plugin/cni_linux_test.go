package plugin_test

// Privileged tests: the built vmlane binary run the way a runtime runs it,
// through libcni, in a "node" netns with pod netns beside it.

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vmlane/vmlane/internal/antispoof"
	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/privtest"
	"github.com/vmlane/vmlane/leases"
	"github.com/vmlane/vmlane/plugin"
)

var allVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

func TestCNILifecycleEveryVersion(t *testing.T) {
	for _, version := range allVersions {
		for _, vm := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/vm=%v", version, vm), func(t *testing.T) {
				n := newNode(t, "10.250.3.0/24")
				pod := netnstest.New(t, "pod")
				list := n.conf(version, vm, nil)
				rt := podRT("c1", pod)

				r, err := n.add(list, rt)
				if err != nil {
					t.Fatalf("ADD: %v", err)
				}
				wantIfs := 3
				if vm {
					wantIfs = 4
				}
				if len(r.Interfaces) != wantIfs || len(r.IPs) != 1 {
					t.Fatalf("result has %d interfaces and %d IPs, want %d and 1: %+v", len(r.Interfaces), len(r.IPs), wantIfs, r)
				}
				ip, _ := netip.AddrFromSlice(r.IPs[0].Address.IP.To4())
				if ip.String() != "10.250.3.2" || r.IPs[0].Gateway.String() != "10.250.3.1" {
					t.Errorf("result IP %s gw %s, want 10.250.3.2 gw 10.250.3.1", ip, r.IPs[0].Gateway)
				}
				ls := n.leaseList()
				if len(ls) != 1 || ls[0].IP != ip || ls[0].Pod.Name != "pod-c1" || ls[0].State != leases.StateReserved {
					t.Fatalf("leases after ADD: %+v", ls)
				}
				podLinks := pod.MustRun(t, "ip", "-o", "addr", "show")
				if vm {
					if r.Interfaces[3].Name != "tap0" || r.Interfaces[3].Mac != plugin.DeriveMAC(ip) || *r.IPs[0].Interface != 2 {
						t.Errorf("VM result: tap %+v, ip on interface %d", r.Interfaces[3], *r.IPs[0].Interface)
					}
					if strings.Contains(podLinks, "10.250.3.2") {
						t.Errorf("VM pod netns has the VM's address:\n%s", podLinks)
					}
					// The pair shares one link group, so DEL removes both
					// in one batch.
					groupOf := func(dev string) string {
						f := strings.Fields(pod.MustRun(t, "ip", "-o", "link", "show", "dev", dev))
						for i := range f[:len(f)-1] {
							if f[i] == "group" {
								return f[i+1]
							}
						}
						return ""
					}
					if g1, g2 := groupOf("tap0"), groupOf("eth0"); g1 == "" || g1 == "default" || g1 != g2 {
						t.Errorf("link groups: tap0 %q, eth0 %q; want one shared non-default group", g1, g2)
					}
					for _, dev := range []string{"tap0", "eth0"} {
						f := pod.MustRun(t, "tc", "filter", "show", "dev", dev, "ingress")
						if !strings.Contains(f, "Egress Redirect to device") {
							t.Errorf("no redirect on %s:\n%s", dev, f)
						}
					}
				} else if !strings.Contains(podLinks, "10.250.3.2/24") {
					t.Errorf("pod netns lacks 10.250.3.2/24:\n%s", podLinks)
				}
				if version != "0.3.0" && version != "0.3.1" {
					if err := n.check(list, rt); err != nil {
						t.Errorf("CHECK: %v", err)
					}
				}
				if version == "1.1.0" {
					if err := n.status(list); err != nil {
						t.Errorf("STATUS: %v", err)
					}
				}
				if err := n.del(list, rt); err != nil {
					t.Fatalf("DEL: %v", err)
				}
				if err := n.del(list, rt); err != nil {
					t.Fatalf("second DEL: %v", err)
				}
				n.assertClean(pod)
			})
		}
	}
}

func TestCNICheckDetectsDamage(t *testing.T) {
	n := newNode(t, "10.250.4.0/24")
	pod := netnstest.New(t, "pod")
	list := n.conf("1.1.0", true, nil)
	rt := podRT("c1", pod)
	if _, err := n.add(list, rt); err != nil {
		t.Fatal(err)
	}
	pod.MustRun(t, "tc", "qdisc", "del", "dev", "tap0", "ingress")
	err := n.check(list, rt)
	if err == nil || !strings.Contains(err.Error(), "no redirect from tap0 to eth0") {
		t.Fatalf("CHECK after removing the TAP's redirect = %v, want it named", err)
	}
	if err := n.del(list, rt); err != nil {
		t.Fatal(err)
	}
	n.assertClean(pod)
}

func TestCNIAddRetriedGivesSameAddress(t *testing.T) {
	n := newNode(t, "10.250.5.0/24")
	pod := netnstest.New(t, "pod")
	list := n.conf("1.1.0", true, nil)
	rt := podRT("c1", pod)
	first, err := n.add(list, rt)
	if err != nil {
		t.Fatal(err)
	}
	again, err := n.add(list, rt)
	if err != nil {
		t.Fatalf("retried ADD: %v", err)
	}
	if first.IPs[0].Address.String() != again.IPs[0].Address.String() || first.Interfaces[3].Mac != again.Interfaces[3].Mac {
		t.Errorf("retried ADD gave %s/%s, first gave %s/%s", again.IPs[0].Address.String(), again.Interfaces[3].Mac, first.IPs[0].Address.String(), first.Interfaces[3].Mac)
	}
	if ls, v := n.leaseList(), n.hostVeths(); len(ls) != 1 || len(v) != 1 {
		t.Errorf("after retried ADD: %d leases, host veths %v; want 1 and 1", len(ls), v)
	}
	if err := n.del(list, rt); err != nil {
		t.Fatal(err)
	}
	n.assertClean(pod)
}

func TestCNIBadInputLeaksNothing(t *testing.T) {
	n := newNode(t, "10.250.6.0/24")
	pod := netnstest.New(t, "pod")
	// A veth stands for the host's uplink: this kernel has no dummy links.
	n.ns.MustRun(t, "ip", "link", "add", "uplink0", "type", "veth", "peer", "name", "uplink0p")
	for _, tc := range []struct {
		name     string
		version  string
		extra    map[string]any
		netns    string
		wantCode uint
		wantMsg  string
	}{
		{name: "bridge is the uplink", version: "1.1.0", extra: map[string]any{"bridge": "uplink0"}, wantCode: 7, wantMsg: `invalid bridge "uplink0"`},
		{name: "bad subnet", version: "1.1.0", extra: map[string]any{"subnet": "10.250.6.0/33"}, wantCode: 7, wantMsg: `invalid subnet "10.250.6.0/33"`},
		{name: "gateway outside", version: "1.1.0", extra: map[string]any{"gateway": "10.9.9.9"}, wantCode: 7, wantMsg: `invalid gateway "10.9.9.9"`},
		{name: "mtu", version: "1.1.0", extra: map[string]any{"mtu": 70000}, wantCode: 7, wantMsg: "invalid mtu 70000"},
		{name: "unknown version", version: "9.9.9", wantCode: 1},
		{name: "missing netns", version: "1.1.0", netns: "/var/run/netns/vmlt-does-not-exist", wantCode: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := podRT("c1", pod)
			if tc.netns != "" {
				rt.NetNS = tc.netns
			}
			_, err := n.add(n.conf(tc.version, true, tc.extra), rt)
			if code := cniCode(err); code != tc.wantCode || !strings.Contains(fmt.Sprint(err), tc.wantMsg) {
				t.Errorf("ADD = %v (code %d), want code %d containing %q", err, code, tc.wantCode, tc.wantMsg)
			}
			n.assertClean(pod)
		})
	}
	if out := n.ns.MustRun(t, "ip", "-o", "addr", "show", "dev", "uplink0"); strings.Contains(out, "inet ") {
		t.Errorf("the plugin touched the uplink: %s", out)
	}
}

func TestCNISubnetFull(t *testing.T) {
	n := newNode(t, "10.250.7.0/30") // one usable address besides the gateway
	pods := []*netnstest.NS{netnstest.New(t, "pod"), netnstest.New(t, "pod")}
	list := n.conf("1.1.0", false, nil)
	if _, err := n.add(list, podRT("c1", pods[0])); err != nil {
		t.Fatal(err)
	}
	_, err := n.add(list, podRT("c2", pods[1]))
	if err == nil || !strings.Contains(err.Error(), "10.250.7.0/30 is full") {
		t.Fatalf("ADD on a full subnet = %v, want an error naming the full subnet", err)
	}
	if err := n.status(list); cniCode(err) != 50 {
		t.Errorf("STATUS on a full subnet = %v, want code 50", err)
	}
	if err := n.del(list, podRT("c1", pods[0])); err != nil {
		t.Fatal(err)
	}
	if err := n.status(list); err != nil {
		t.Errorf("STATUS after DEL = %v", err)
	}
	n.assertClean(pods...)
}

func TestCNIStatusWithoutBridge(t *testing.T) {
	n := newNode(t, "10.250.8.0/24")
	if err := n.status(n.conf("1.1.0", true, nil)); cniCode(err) != 50 {
		t.Errorf("STATUS before any ADD (no bridge) = %v, want code 50", err)
	}
}

func TestCNIGCReleasesStaleAttachments(t *testing.T) {
	n := newNode(t, "10.250.9.0/24")
	list := n.conf("1.1.0", true, nil)
	var rts []*libcni.RuntimeConf
	for i := range 3 {
		pod := netnstest.New(t, "pod")
		rt := podRT(fmt.Sprintf("c%d", i), pod)
		if _, err := n.add(list, rt); err != nil {
			t.Fatal(err)
		}
		rts = append(rts, rt)
	}
	if err := n.gc(list, rts[1]); err != nil {
		t.Fatalf("GC: %v", err)
	}
	ls := n.leaseList()
	if len(ls) != 1 || ls[0].ContainerID != "c1" {
		t.Fatalf("leases after GC: %+v, want only c1", ls)
	}
	if v := n.hostVeths(); len(v) != 1 || v[0] != plugin.HostVethName(leases.Key{ContainerID: "c1", IfName: "eth0"}) {
		t.Errorf("host veths after GC: %v", v)
	}
}

func TestCNIConcurrentAdds(t *testing.T) {
	const pods = 64
	n := newNode(t, "10.250.10.0/24")
	list := n.conf("1.1.0", true, nil)
	nss := make([]*netnstest.NS, pods)
	for i := range nss {
		nss[i] = netnstest.New(t, "pod")
	}
	errs := make([]error, pods)
	results := make([]*current.Result, pods)
	var wg sync.WaitGroup
	for i := range pods {
		wg.Go(func() {
			results[i], errs[i] = n.add(list, podRT(fmt.Sprintf("c%02d", i), nss[i]))
		})
	}
	wg.Wait()
	seen := map[string]int{}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("ADD %d: %v", i, err)
		}
		ip := results[i].IPs[0].Address.IP.String()
		if j, dup := seen[ip]; dup {
			t.Errorf("%s handed to both %d and %d", ip, j, i)
		}
		seen[ip] = i
	}
	if ls := n.leaseList(); len(ls) != pods {
		t.Errorf("%d leases after %d ADDs", len(ls), pods)
	}
	for i := range pods {
		wg.Go(func() { errs[i] = n.del(list, podRT(fmt.Sprintf("c%02d", i), nss[i])) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	n.assertClean(nss...)
	for _, p := range nss {
		if q := p.MustRun(t, "tc", "qdisc", "show"); strings.Contains(q, "ingress") {
			t.Errorf("ingress qdisc left in %s: %s", p.Name, q)
		}
	}
}

func TestPlainPodReachesGateway(t *testing.T) {
	n := newNode(t, "10.250.11.0/24")
	pod := netnstest.New(t, "pod")
	privtest.Require(t, "ping")
	list := n.conf("1.1.0", false, nil)
	if _, err := n.add(list, podRT("c1", pod)); err != nil {
		t.Fatal(err)
	}
	if out, err := pod.Run("ping", "-c", "2", "-W", "2", "10.250.11.1"); err != nil {
		t.Fatalf("pod cannot ping its gateway: %v\n%s", err, out)
	}
	if err := n.del(list, podRT("c1", pod)); err != nil {
		t.Fatal(err)
	}
}

// TestDualStackPodsReachEachOther: two plain pods of a dual-stack network
// get both addresses, usable at once (no DAD wait), ping the IPv6 gateway
// and each other by IPv6, and CHECK and DEL cover both families.
func TestDualStackPodsReachEachOther(t *testing.T) {
	n := newNode(t, "10.250.12.0/24")
	privtest.Require(t, "ping")
	list := n.conf("1.1.0", false, map[string]any{"subnet6": "fd00:250:12::/64"})
	pods := []*netnstest.NS{netnstest.New(t, "pod"), netnstest.New(t, "pod")}
	var results []*current.Result
	for i, pod := range pods {
		r, err := n.add(list, podRT(fmt.Sprintf("d%d", i), pod))
		if err != nil {
			t.Fatal(err)
		}
		if len(r.IPs) != 2 || r.IPs[1].Address.String() != fmt.Sprintf("fd00:250:12::%d/64", i+2) {
			t.Fatalf("result IPs %v, want the IPv4 address and fd00:250:12::%d/64", r.IPs, i+2)
		}
		results = append(results, r)
	}
	// No DAD: the address is not tentative the moment ADD returns.
	if out := pods[0].MustRun(t, "ip", "-6", "addr", "show", "dev", "eth0", "scope", "global"); strings.Contains(out, "tentative") || !strings.Contains(out, "fd00:250:12::2/64") {
		t.Fatalf("pod's IPv6 address is missing or tentative:\n%s", out)
	}
	if out := pods[0].MustRun(t, "ip", "-6", "route", "show", "default"); !strings.Contains(out, "via fd00:250:12::1 dev eth0") {
		t.Errorf("pod's IPv6 default route:\n%s", out)
	}
	for _, dst := range []string{"fd00:250:12::1", results[1].IPs[1].Address.IP.String()} {
		if out, err := pods[0].Run("ping", "-6", "-c", "2", "-W", "2", dst); err != nil {
			t.Errorf("pod cannot ping %s: %v\n%s", dst, err, out)
		}
	}
	for i, pod := range pods {
		rt := podRT(fmt.Sprintf("d%d", i), pod)
		if err := n.check(list, rt); err != nil {
			t.Errorf("CHECK: %v", err)
		}
		if err := n.del(list, rt); err != nil {
			t.Fatal(err)
		}
	}
	if ls := n.leaseList(); len(ls) != 0 {
		t.Errorf("leases after DEL: %v", ls)
	}
	n.assertClean(pods...)
}

// TestCNIAddAgainKeepsAntiSpoofEntry: DEL leaves the port's anti-spoofing
// entry to vmlaned; an ADD of the same attachment (a runtime retrying with
// the same container ID) gets the address that entry names when it is
// free, so the entry stays as it is rather than being replaced (a delete,
// which waits for an RCU grace period under the node's nftables lock).
// When another pod took that address meanwhile, ADD gets another and the
// entry is replaced: the port may never send as the other pod.
func TestCNIAddAgainKeepsAntiSpoofEntry(t *testing.T) {
	n := newNode(t, "10.250.12.0/24")
	pod := netnstest.New(t, "pod")
	list := n.conf("1.1.0", false, nil)
	rt := podRT("c1", pod)
	port := plugin.HostVethName(leases.Key{ContainerID: "c1", IfName: "eth0"})
	entries := func() []string {
		t.Helper()
		var ps []antispoof.Port
		if err := n.in(func() error {
			var err error
			ps, err = antispoof.Table{}.Ports()
			return err
		}); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range ps {
			if p.Name == port {
				got = append(got, p.String())
			}
		}
		return got
	}
	addIP := func(rt *libcni.RuntimeConf) string {
		t.Helper()
		r, err := n.add(list, rt)
		if err != nil {
			t.Fatal(err)
		}
		return r.IPs[0].Address.IP.String()
	}
	first := addIP(rt)
	want := entries()
	if err := n.del(list, rt); err != nil {
		t.Fatal(err)
	}
	if got := entries(); !slices.Equal(got, want) {
		t.Fatalf("after DEL the port's entries are %q, want %q left for vmlaned", got, want)
	}
	other := netnstest.New(t, "other")
	if ip := addIP(podRT("c2", other)); ip == first {
		t.Fatalf("another attachment got %s, the address just released", ip)
	}
	if again := addIP(rt); again != first {
		t.Errorf("ADD again of c1 got %s, want %s, the address its entry names", again, first)
	}
	if got := entries(); !slices.Equal(got, want) {
		t.Errorf("after ADD again the port's entries are %q, want %q unchanged", got, want)
	}

	// c1's address taken by c3 between c1's DEL and its next ADD.
	if err := n.del(list, rt); err != nil {
		t.Fatal(err)
	}
	third := netnstest.New(t, "third")
	rt3 := podRT("c3", third)
	rt3.CapabilityArgs = map[string]any{"ips": []string{first}}
	if ip := addIP(rt3); ip != first {
		t.Fatalf("c3 asked for %s and got %s", first, ip)
	}
	again := addIP(rt)
	if again == first {
		t.Fatalf("c1 got %s, c3's address", again)
	}
	if got := entries(); len(got) != 1 || strings.Fields(got[0])[2] != again {
		t.Errorf("after c1's ADD on a new address the port's entries are %q, want one naming %s only", got, again)
	}
	for _, p := range []struct {
		rt  *libcni.RuntimeConf
		pod *netnstest.NS
	}{{rt, pod}, {podRT("c2", other), other}, {rt3, third}} {
		if err := n.del(list, p.rt); err != nil {
			t.Fatal(err)
		}
	}
	n.assertClean(pod, other, third)
}

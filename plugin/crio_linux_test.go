package plugin_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/vmlane/vmlane/internal/bridge"
	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/leases"
	"github.com/vmlane/vmlane/plugin"
)

// crioRT is the RuntimeConf CRI-O builds for a pod sandbox, as read from
// CRI-O f954a17 (v1.36.0-191) and the ocicni v0.5.0 it vendors:
// ocicni.go buildCNIRuntimeConf, from server/sandbox_network.go
// newPodNetwork. IfName is "eth0" (ocicni fillPodNetworks: the first free
// eth%d); Args in that order, K8S_POD_INFRA_CONTAINER_ID being the sandbox
// ID; the pod annotations always as a capability, an empty map for a pod
// without any. (cgroupPath and bandwidth go only to plugins that declare
// them, which vmlane does not.)
func crioRT(id string, pod *netnstest.NS, annotations map[string]string) *libcni.RuntimeConf {
	if annotations == nil {
		annotations = map[string]string{}
	}
	netns := ""
	if pod != nil {
		netns = pod.Path
	}
	return &libcni.RuntimeConf{
		ContainerID: id,
		NetNS:       netns,
		IfName:      "eth0",
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", "default"},
			{"K8S_POD_NAME", "pod-" + id},
			{"K8S_POD_INFRA_CONTAINER_ID", id},
			{"K8S_POD_UID", "uid-" + id},
		},
		CapabilityArgs: map[string]any{"io.kubernetes.cri.pod-annotations": annotations},
	}
}

// crioStart is what CRI-O does to start a pod's network
// (server/sandbox_network.go networkStart): ADD (ocicni addToNetwork),
// then at once CHECK with the config and RuntimeConf from libcni's cache
// (GetPodNetworkStatusWithContext → checkNetwork → loadNetworkFromCache),
// then the pod IPs from the cached result, every IP of it
// (GetNetworkListCachedResult, cnicurrent.GetResult).
func crioStart(t *testing.T, n *node, list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) []netip.Addr {
	t.Helper()
	if _, err := n.add(list, rt); err != nil {
		t.Fatalf("%s: ADD: %v", rt.ContainerID, err)
	}
	var cachedIPs []netip.Addr
	err := n.in(func() error {
		raw, cachedRT, err := n.cni.GetNetworkListCachedConfig(list, rt)
		if err != nil || raw == nil {
			t.Fatalf("%s: no cached config (%v)", rt.ContainerID, err)
		}
		cachedList, err := libcni.ConfListFromBytes(raw)
		if err != nil {
			return err
		}
		if err := n.cni.CheckNetworkList(context.Background(), cachedList, cachedRT); err != nil {
			t.Fatalf("%s: CHECK right after ADD: %v", rt.ContainerID, err)
		}
		res, err := n.cni.GetNetworkListCachedResult(cachedList, cachedRT)
		if err != nil || res == nil {
			t.Fatalf("%s: no cached result (%v)", rt.ContainerID, err)
		}
		r, err := current.GetResult(res)
		if err != nil {
			return err
		}
		for _, ip := range r.IPs {
			a, _ := netip.AddrFromSlice(ip.Address.IP)
			cachedIPs = append(cachedIPs, a.Unmap())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return cachedIPs
}

// TestCRIOSequence: vmlane under CRI-O's calls, in CRI-O's order, on one
// dual-stack conflist that serves plain pods and VM pods (chosen by the
// vmlane.io/vm annotation, as CRI-O has one network per node: ocicni
// loadNetworks takes the first valid file of network_dir, and there is no
// per-handler folder).
//
//   - STATUS at start (cnimgr pollUntilReady → ocicni StatusWithContext →
//     GetStatusNetworkList) succeeds, and GC with no known sandbox
//     (server.go restore → networkGC → cnimgr doGC → GCNetworkList) is
//     clean;
//   - each pod: ADD, CHECK at once from the cache, and the pod IPs from
//     the cached result: exactly one per family, for the VM pod too (every
//     IP of a result becomes a pod IP in CRI-O);
//   - CRI-O restarts knowing only the VM's sandbox: GC (ValidAttachments
//     {sandbox ID, eth0}) removes the plain pod's attachment and frees its
//     addresses, and leaves the VM's;
//   - CRI-O stops the VM pod after its netns is gone: DEL with an empty
//     NetNS (networkStop logs it and calls DEL anyway) succeeds, and the
//     VM's addresses are held for its next pod.
func TestCRIOSequence(t *testing.T) {
	n := newNode(t, "10.250.14.0/24")
	list := n.conf("1.1.0", false, map[string]any{
		"subnet6":      "fd00:250:14::/64",
		"capabilities": map[string]bool{"mac": true, "ips": true, "io.kubernetes.cri.pod-annotations": true},
	})
	// CRI-O polls STATUS every 500 ms from its start and holds pod
	// creation until it succeeds: vmlane is not ready (code 50) until
	// the node has its bridge, which vmlaned makes before it writes the
	// conflist, and ready after.
	if err := n.status(list); cniCode(err) != 50 {
		t.Fatalf("STATUS before the node is set up = %v, want code 50", err)
	}
	if err := n.in(func() error {
		if _, err := bridge.Ensure(plugin.DefaultBridge, netip.MustParsePrefix("10.250.14.1/24"), 1500, plugin.GatewayMAC); err != nil {
			return err
		}
		return bridge.EnsureAddr(plugin.DefaultBridge, netip.MustParsePrefix("fd00:250:14::1/64"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := n.status(list); err != nil {
		t.Fatalf("STATUS once the node is set up: %v", err)
	}
	if err := n.gc(list); err != nil {
		t.Fatalf("GC at start: %v", err)
	}

	plainPod, vmPod := netnstest.New(t, "pod"), netnstest.New(t, "pod")
	plainRT := crioRT("crio-plain", plainPod, nil)
	vmRT := crioRT("crio-vm", vmPod, map[string]string{"vmlane.io/vm": "vm-crio", "io.kubernetes.cri-o.SandboxID": "crio-vm"})
	ips := map[string][]netip.Addr{}
	for _, rt := range []*libcni.RuntimeConf{plainRT, vmRT} {
		got := crioStart(t, n, list, rt)
		if len(got) != 2 || !got[0].Is4() || !got[1].Is6() {
			t.Errorf("%s: pod IPs %v, want one IPv4 and one IPv6", rt.ContainerID, got)
		}
		ips[rt.ContainerID] = got
	}
	if out := vmPod.MustRun(t, "ip", "-d", "link", "show", "tap0"); out == "" {
		t.Error("the annotated pod has no TAP")
	}
	if err := n.status(list); err != nil {
		t.Errorf("STATUS with pods: %v", err)
	}

	// CRI-O restarts; it restored only the VM's sandbox.
	if err := n.gc(list, vmRT); err != nil {
		t.Fatalf("GC at restart: %v", err)
	}
	for _, l := range n.leaseList() {
		if l.IP == ips["crio-plain"][0] {
			t.Errorf("the plain pod's lease outlived GC: %+v", l)
		}
	}

	vmPod.Delete()
	if err := n.del(list, crioRT("crio-vm", nil, map[string]string{"vmlane.io/vm": "vm-crio"})); err != nil {
		t.Fatalf("DEL without a netns: %v", err)
	}
	ls := n.leaseList()
	if len(ls) != 1 || ls[0].State != leases.StateHeld || ls[0].VMName != "default/vm-crio" || ls[0].IP != ips["crio-vm"][0] || ls[0].IP6 != ips["crio-vm"][1] {
		t.Errorf("after the VM pod's DEL: %+v, want its lease held for the VM, both addresses", ls)
	}
}

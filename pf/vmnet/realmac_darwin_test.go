//go:build darwin && realmac

package vmnet

// TestAcquireOnARealMac is the part of .github/workflows/macos.yml that
// acquires the pod network from vmlane-vmnet: a second process, as a VM
// runtime would, on a macOS 26 runner where install.sh started
// vmlane-vmnet and vmlaned put it on VMLANE_VMNET_SUBNET.
//
//	sudo -E VMLANE_VMNET_SUBNET=10.123.45.0/24 go test -tags realmac -run TestAcquireOnARealMac -v ./pf/vmnet
//
// As root it acquires the network, reads back its subnet, starts a vmnet
// interface on it (what a VM's NIC is; no VM boots) and finds the bridge
// holding the gateway. With VMLANE_VMNET_EXPECT=not-allowed (run as a user
// outside vmlane-vmnet's --group) it checks the refusal instead.

import (
	"net/netip"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/ebitengine/purego/objc"

	"github.com/vmlane/vmlane/pf"
)

func TestAcquireOnARealMac(t *testing.T) {
	want, err := netip.ParsePrefix(os.Getenv("VMLANE_VMNET_SUBNET"))
	if err != nil {
		t.Fatalf("VMLANE_VMNET_SUBNET: %v", err)
	}
	l, err := Acquire(DefaultNetworkName)
	if os.Getenv("VMLANE_VMNET_EXPECT") == "not-allowed" {
		be, ok := err.(*BrokerError)
		if !ok || be.Code != NotAllowed {
			t.Fatalf("Acquire as uid %d: %v, want NOT_ALLOWED", os.Getuid(), err)
		}
		t.Logf("refused as expected: %v", err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	n, err := l.Network()
	if err != nil {
		t.Fatal(err)
	}
	api, err := OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	addr, mask := api.NetworkGetIPv4Subnet(Network(uintptr(n)))
	got := prefixOf(addr, mask)
	t.Logf("vmnet_network_get_ipv4_subnet of the acquired network: %s %s (%s)", addr, mask, got)
	if got != want {
		t.Fatalf("the acquired network is on %s, want %s", got, want)
	}

	// A vmnet interface on the network, as a VM's NIC would be: the
	// bridge comes up with the gateway address.
	vm, err := purego.Dlopen(vmnetPath, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		t.Fatal(err)
	}
	x, err := openXPC()
	if err != nil {
		t.Fatal(err)
	}
	var start func(network, desc unsafe.Pointer, queue uintptr, handler objc.Block) unsafe.Pointer
	var stop func(iface unsafe.Pointer, queue uintptr, handler objc.Block) uint32
	purego.RegisterLibFunc(&start, vm, "vmnet_interface_start_with_network")
	purego.RegisterLibFunc(&stop, vm, "vmnet_stop_interface")
	q := x.queueCreate("dev.vmlane.vmnet.test", 0)
	started := make(chan uint32, 1)
	h := objc.NewBlock(func(_ objc.Block, status uint32, _ unsafe.Pointer) { started <- status })
	defer h.Release()
	desc := x.dictCreateEmpty()
	iface := start(n, desc, q, h)
	x.release(desc)
	select {
	case st := <-started:
		if Status(st) != Success || iface == nil {
			t.Fatalf("vmnet_interface_start_with_network: %s", Status(st))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("vmnet_interface_start_with_network: no completion in 30 s")
	}
	gw := want.Addr().Next()
	var bridge string
	for deadline := time.Now().Add(20 * time.Second); bridge == "" && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		ifs, _ := pf.Interfaces()
		bridge = BridgeOf(ifs, gw)
	}
	if bridge == "" {
		ifs, _ := pf.Interfaces()
		t.Fatalf("no interface holds the gateway %s with an interface up: %+v", gw, ifs)
	}
	t.Logf("the network's bridge: %s holds %s", bridge, gw)
	stopped := make(chan uint32, 1)
	hs := objc.NewBlock(func(_ objc.Block, status uint32) { stopped <- status })
	defer hs.Release()
	if st := stop(iface, q, hs); Status(st) != Success {
		t.Errorf("vmnet_stop_interface: %s", Status(st))
	}
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Error("vmnet_stop_interface: no completion in 10 s")
	}
}

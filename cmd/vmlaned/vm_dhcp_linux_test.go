package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/vmlane/vmlane/internal/netnstest"
	"github.com/vmlane/vmlane/internal/privtest"
	"github.com/vmlane/vmlane/internal/testvm"
	"github.com/vmlane/vmlane/leases"
)

// TestVMGetsReservedAddressByDHCP is the whole Linux node path on one node:
// vmlaned (standalone) makes the bridge, the conflists and the DHCP server;
// the CNI plugin, run with vmlaned's VM conflist the way a runtime runs it,
// reserves an address and makes the TAP; a real QEMU guest on that TAP with
// the result's MAC asks for DHCP, gets exactly the reserved address with
// the MTU, DNS and routes, and pings its gateway; the lease turns bound.
func TestVMGetsReservedAddressByDHCP(t *testing.T) {
	privtest.Require(t, "ip", "iptables", "qemu-system-x86_64", "nsenter")
	g, err := testvm.Find()
	if errors.Is(err, testvm.ErrNotBuilt) {
		privtest.Missing(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	bin := buildBinaries(t)
	node := netnstest.New(t, "node")
	pod := netnstest.New(t, "pod")
	dir := t.TempDir()
	leaseFile := filepath.Join(dir, "leases.json")
	confDir := filepath.Join(dir, "net.d")
	cmd := node.Command(filepath.Join(bin, "vmlaned"), "--pod-cidr", "10.250.30.0/24", "--cni-conf-dir", confDir,
		"--lease-file", leaseFile, "--mtu", "1400", "--dns", "10.96.0.10", "--search", "default.svc.cluster.local",
		"--domain", "cluster.local", "--health-addr", "127.0.0.1:19465", "--metrics-addr", "127.0.0.1:19464")
	var logs syncBuffer
	cmd.Stderr = &logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("vmlaned log:\n%s", logs.String())
		}
	})
	vmConf := filepath.Join(confDir, VMConflistName)
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(logs.String(), "DHCP server up"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("vmlaned did not start its DHCP server:\n%s", logs.String())
		}
	}

	// CNI ADD the way a runtime does it: the network's one plugin config,
	// with cniVersion and name, on stdin.
	raw, err := os.ReadFile(vmConf)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		CNIVersion string            `json:"cniVersion"`
		Name       string            `json:"name"`
		Plugins    []json.RawMessage `json:"plugins"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatal(err)
	}
	conf := strings.Replace(string(list.Plugins[0]), "{", `{"cniVersion":"`+list.CNIVersion+`","name":"`+list.Name+`",`, 1)
	add := node.Command(filepath.Join(bin, "vmlane"))
	add.Env = append(os.Environ(), "CNI_COMMAND=ADD", "CNI_CONTAINERID=vm1", "CNI_NETNS="+pod.Path, "CNI_IFNAME=eth0",
		"CNI_PATH="+bin, "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=vm-one")
	add.Stdin = strings.NewReader(conf)
	out, err := add.Output()
	if err != nil {
		t.Fatalf("CNI ADD: %v\n%s", err, out)
	}
	var res current.Result
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("CNI result: %v\n%s", err, out)
	}
	tap := res.Interfaces[*res.IPs[0].Interface]
	reserved := res.IPs[0].Address.IP.String()

	vm, err := g.Run(t.Context(), testvm.Config{
		NetNS: pod.Path, Tap: tap.Name, MAC: tap.Mac, Mode: testvm.ModeDHCP, Timeout: 3 * time.Minute,
	})
	if err != nil {
		t.Fatalf("guest: %v", err)
	}
	l := vm.DHCP
	if l == nil {
		t.Fatalf("guest got no DHCP lease: %+v", vm)
	}
	if l.IP.String() != reserved || l.Bits != 24 || l.MTU != 1400 || l.Hostname != "vm-one" || l.Domain != "cluster.local" ||
		len(l.DNS) != 1 || l.DNS[0].String() != "10.96.0.10" || len(l.Search) != 1 || l.ServerID.String() != "10.250.30.1" {
		t.Errorf("guest's lease %+v; want %s/24, MTU 1400, hostname vm-one, DNS 10.96.0.10, search and domain, server 10.250.30.1", l, reserved)
	}
	if n := len(l.Routes); n == 0 || l.Routes[n-1].Dst.String() != "0.0.0.0/0" {
		t.Errorf("option 121 routes %+v: want the default route last", l.Routes)
	}
	if len(vm.Pings) == 0 || !vm.Pings[0].OK {
		t.Errorf("guest could not ping its gateway: %+v", vm.Pings)
	}
	snap, err := leases.Read(leaseFile)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := snap.ByMAC(tap.Mac); !ok || got.State != leases.StateBound || got.IP.String() != reserved {
		t.Errorf("lease after DHCP: %+v (found %v), want bound to %s", got, ok, reserved)
	}
}

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/vmlane/vmlane/internal/netnstest"
	"github.com/vmlane/vmlane/internal/privtest"
	"github.com/vmlane/vmlane/leases"
)

// TestLeasesRepair: pods attached through libcni (as containerd does, so
// its result cache is real), then the lease file torn; `vmlanectl leases
// repair`, given the file by a relative path with a //, rebuilds it from
// the cache, the bridge's links and the anti-spoofing table, keeps the
// damaged file, and the next pod gets an address no running pod holds.
func TestLeasesRepair(t *testing.T) {
	privtest.Require(t, "ip", "iptables")
	bin := buildBinaries(t)
	node := netnstest.New(t, "node")
	d := startStandalone(t, bin, node, "10.250.34.0/24")
	cacheDir := t.TempDir()
	cni := libcni.NewCNIConfigWithCacheDir([]string{bin}, cacheDir, nil)
	add := func(conflist, cid string) *current.Result {
		t.Helper()
		list, err := libcni.ConfListFromFile(conflist)
		if err != nil {
			t.Fatal(err)
		}
		pod := netnstest.New(t, "pod-"+cid)
		var res *current.Result
		err = node.Do(func() error {
			r, err := cni.AddNetworkList(context.Background(), list, &libcni.RuntimeConf{
				ContainerID: cid, NetNS: pod.Path, IfName: "eth0",
				Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", "pod-" + cid}},
			})
			if err != nil {
				return err
			}
			res, err = current.NewResultFromResult(r)
			return err
		})
		if err != nil {
			t.Fatalf("ADD %s: %v", cid, err)
		}
		return res
	}
	add(filepath.Join(d.confDir, VMConflistName), "vm1")
	add(filepath.Join(d.confDir, ConflistName), "plain1")
	before, err := leases.Read(d.leaseFile)
	if err != nil {
		t.Fatal(err)
	}
	want := leaseSummary(before.Leases())

	// A torn file: the header and half of the first lease.
	data, err := os.ReadFile(d.leaseFile)
	if err != nil {
		t.Fatal(err)
	}
	torn := data[:strings.Index(string(data), "\n")+20]
	if err := os.WriteFile(d.leaseFile, torn, 0o644); err != nil {
		t.Fatal(err)
	}
	// --lease-file spelled otherwise than the conflists do (relative,
	// with a //): the CNI cache's entries are still this file's.
	out, err := node.Run("sh", "-c", "cd \"$1\" && \"$2\" leases repair --lease-file .//"+filepath.Base(d.leaseFile)+" --cni-cache-dir \"$3\"",
		"sh", filepath.Dir(d.leaseFile), filepath.Join(bin, "vmlanectl"), cacheDir)
	if err != nil {
		t.Fatalf("repair: %v", err)
	}
	t.Logf("vmlanectl leases repair:\n%s", out)
	after, err := leases.Read(d.leaseFile)
	if err != nil {
		t.Fatalf("the repaired file does not read: %v", err)
	}
	if got := leaseSummary(after.Leases()); got != want {
		t.Errorf("repaired leases:\n%s\nwant, as before the damage:\n%s", got, want)
	}
	kept, _ := filepath.Glob(d.leaseFile + ".damaged-*")
	if len(kept) != 1 {
		t.Errorf("damaged file kept as %v, want one", kept)
	} else if b, _ := os.ReadFile(kept[0]); string(b) != string(torn) {
		t.Errorf("%s does not hold the damaged bytes", kept[0])
	}
	// A file that reads fine is left alone without --force.
	if out, err := node.Run(filepath.Join(bin, "vmlanectl"), "leases", "repair", "--lease-file", d.leaseFile, "--cni-cache-dir", cacheDir); err == nil || !strings.Contains(out, "reads fine") {
		t.Errorf("repair of a good file: %v\n%s", err, out)
	}
	// The next pod gets an address none of the others holds.
	r := add(filepath.Join(d.confDir, ConflistName), "plain2")
	for _, l := range after.Leases() {
		if l.IP.String() == r.IPs[0].Address.IP.String() {
			t.Errorf("the next pod got %s, which %s holds", l.IP, l.Key())
		}
	}
}

// leaseSummary is what repair must restore of each lease: address, MAC,
// attachment, VM or not, and the anti-spoofed port.
func leaseSummary(ls []leases.Lease) string {
	var out []string
	for _, l := range ls {
		out = append(out, strings.Join([]string{l.IP.String(), l.MAC, l.Key().String(), l.BridgePort, map[bool]string{true: "vm", false: "plain"}[l.VM], l.Pod.Name}, " "))
	}
	return strings.Join(out, "\n")
}

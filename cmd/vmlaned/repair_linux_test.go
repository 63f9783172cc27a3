package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/privtest"
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
	// tryAdd is ADD through libcni; add fails t on error (on the test's
	// goroutine only).
	tryAdd := func(conflist, cid string, pod *netnstest.NS) (*current.Result, error) {
		list, err := libcni.ConfListFromFile(conflist)
		if err != nil {
			return nil, err
		}
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
			return nil, fmt.Errorf("ADD %s: %w", cid, err)
		}
		return res, nil
	}
	add := func(conflist, cid string) *current.Result {
		t.Helper()
		res, err := tryAdd(conflist, cid, netnstest.New(t, "pod-"+cid))
		if err != nil {
			t.Fatal(err)
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

	t.Run("what repair keeps", func(t *testing.T) {
		// A damaged file holding a newer vmlane's lease (a state and a
		// member this one does not know), a second lease of vm1's
		// attachment, and a torn last line.
		good, err := os.ReadFile(d.leaseFile)
		if err != nil {
			t.Fatal(err)
		}
		cursor := before.File.LastReserved
		if cur, err := leases.Read(d.leaseFile); err == nil {
			cursor = cur.File.LastReserved
		}
		lines := strings.Split(strings.TrimSuffix(string(good), "\n"), "\n")
		body := lines[1 : len(lines)-1] // the leases; the last line ends "]}"
		last := strings.TrimSuffix(lines[len(lines)-1], "]}")
		damaged := strings.Join(append(append([]string{lines[0]}, body...), last+",",
			`{"mac":"52:54:00:00:00:77","ip":"10.250.34.200","state":"parked","source":"dhcp","zone":"b"},`,
			`{"mac":"02:76:0a:fa:22:c9","ip":"10.250.34.201","state":"reserved","source":"cni","containerID":"vm1","ifname":"eth0"},`,
			`{"mac":"02:76:0a:fa:22:ca","ip":"10.250.34.202","sta`), "\n") + "\n"
		if err := os.WriteFile(d.leaseFile, []byte(damaged), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := node.Run(filepath.Join(bin, "vmlanectl"), "leases", "repair", "--lease-file", d.leaseFile, "--cni-cache-dir", cacheDir)
		if err != nil {
			t.Fatalf("repair: %v", err)
		}
		rep, err := leases.Read(d.leaseFile)
		if err != nil {
			t.Fatal(err)
		}
		var parked, vm1 []leases.Lease
		for _, l := range rep.Leases() {
			if l.MAC == "52:54:00:00:00:77" {
				parked = append(parked, l)
			}
			if l.ContainerID == "vm1" {
				vm1 = append(vm1, l)
			}
		}
		if len(parked) != 1 || !strings.Contains(parked[0].Unknown.String(), `"zone":"b"`) {
			t.Errorf("the newer vmlane's lease after repair: %+v; want it kept, its member zone too\n%s", parked, out)
		}
		if len(vm1) != 1 || vm1[0].IP.String() == "10.250.34.201" {
			t.Errorf("vm1's leases after repair: %+v; want one, the cache's\n%s", vm1, out)
		}
		if rep.File.LastReserved != cursor {
			t.Errorf("allocation cursor %v after repair, want %v kept", rep.File.LastReserved, cursor)
		}
		if !strings.Contains(out, "WARNING: the damaged file's line") {
			t.Errorf("repair did not warn of the torn line:\n%s", out)
		}
	})

	t.Run("an ADD racing repair --force", func(t *testing.T) {
		// Repair of a live file while pods are added: whichever commits
		// first, no ADD's lease is lost (Replace writes only the file it
		// planned from; an ADD's reservation before its veth is kept).
		for i := range 8 {
			cid := fmt.Sprintf("race%d", i)
			pod := netnstest.New(t, "pod-"+cid)
			type added struct {
				res *current.Result
				err error
			}
			done := make(chan added, 1)
			go func() {
				res, err := tryAdd(filepath.Join(d.confDir, ConflistName), cid, pod)
				done <- added{res, err}
			}()
			if i%2 == 1 {
				time.Sleep(time.Duration(i) * 15 * time.Millisecond)
			}
			out, err := node.Run(filepath.Join(bin, "vmlanectl"), "leases", "repair", "--force", "--lease-file", d.leaseFile, "--cni-cache-dir", cacheDir)
			a := <-done
			if a.err != nil {
				t.Fatalf("round %d: %v", i, a.err)
			}
			res := a.res
			if err != nil {
				t.Fatalf("round %d: repair: %v\n%s", i, err, out)
			}
			snap, err := leases.Read(d.leaseFile)
			if err != nil {
				t.Fatal(err)
			}
			var l leases.Lease
			ok := false
			for _, x := range snap.Leases() {
				if x.Key() == (leases.Key{ContainerID: cid, IfName: "eth0"}) {
					l, ok = x, true
				}
			}
			if !ok || l.IP.String() != res.IPs[0].Address.IP.String() {
				t.Fatalf("round %d: %s got %s from its ADD, the file holds %+v (%v)\n%s", i, cid, res.IPs[0].Address.IP, l, ok, out)
			}
		}
	})
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

package pf

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestVmnetNetworkGolden(t *testing.T) {
	res := []Reservation{
		{MAC: "02:00:0A:F4:05:09", IP: netip.MustParseAddr("10.244.5.9")},
		{MAC: "2:0:a:f4:5:7", IP: netip.MustParseAddr("10.244.5.7")},
		{MAC: "02:00:0a:f4:05:0a", IP: netip.MustParseAddr("10.244.6.10")}, // outside
		{MAC: "02:00:0a:f4:05:01", IP: netip.MustParseAddr("10.244.5.1")},  // the gateway
		{MAC: "02:00:0a:f4:05:0b", IP: netip.MustParseAddr("10.244.5.7")},  // address taken
		{MAC: "not-a-mac", IP: netip.MustParseAddr("10.244.5.20")},
	}
	dns := &DNS{Nameservers: []string{"10.96.0.10"}, Search: []string{"default.svc.cluster.local"}, Domain: "cluster.local"}
	n, problems, err := NewNetwork(podCIDR, 1500, dns, res)
	if err != nil {
		t.Fatal(err)
	}
	out, err := n.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "vmnet-network.json.golden", out)
	want := []string{
		`reservation 10.244.5.1 for 02:00:0a:f4:05:01: vmnet reserves that address`,
		`reservation 10.244.5.7 for 02:00:0a:f4:05:0b: address or MAC already reserved`,
		`reservation 10.244.5.20 for "not-a-mac": not a 48-bit MAC`,
		`reservation 10.244.6.10 for 02:00:0a:f4:05:0a: outside 10.244.5.0/24`,
	}
	if diff := cmp.Diff(want, problems); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	// A network without reservations or DNS still lists [] reservations,
	// so a runtime can tell "none" from an old file format.
	empty, _, _ := NewNetwork(netip.MustParsePrefix("10.244.8.0/22"), 0, &DNS{}, nil)
	out, _ = empty.Marshal()
	golden(t, "vmnet-network-empty.json.golden", out)
}

func TestWriteNetworkFileOnlyOnChange(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "vmnet-network.json")
	state := filepath.Join(dir, "vmnet.json")
	n, _, _ := NewNetwork(podCIDR, 1500, nil, nil)
	if wrote, err := WriteNetworkFile(path, state, n); !wrote || err != nil {
		t.Fatalf("first write = %v, %v", wrote, err)
	}
	if wrote, err := WriteNetworkFile(path, state, n); wrote || err != nil {
		t.Fatalf("same content = %v, %v; want no write", wrote, err)
	}
	n.Reservations = append(n.Reservations, Reservation{MAC: "02:00:0a:f4:05:07", IP: netip.MustParseAddr("10.244.5.7")})
	if wrote, _ := WriteNetworkFile(path, state, n); !wrote {
		t.Fatal("changed content not written")
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v: VM runtimes running as users must read it", fi.Mode().Perm())
	}
	done, err := RestoreVmnet(state)
	if err != nil || len(done) != 1 || !strings.HasPrefix(done[0], "removed ") {
		t.Fatalf("RestoreVmnet = %q, %v", done, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Error("network file left after teardown")
	}
}

package leases_test

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmlane/vmlane/leases"
)

func TestSalvageAndReplace(t *testing.T) {
	subnet, gw := netip.MustParsePrefix("10.244.3.0/24"), netip.MustParseAddr("10.244.3.1")
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	f := &leases.File{Version: leases.Version, Node: "node-a", Subnet: subnet, Gateway: gw, Leases: []leases.Lease{
		{MAC: "02:00:00:00:00:02", IP: netip.MustParseAddr("10.244.3.2"), State: leases.StateReserved, Source: leases.SourceCNI, ContainerID: "a", IfName: "eth0", Created: now},
		{MAC: "02:00:00:00:00:03", IP: netip.MustParseAddr("10.244.3.3"), State: leases.StateBound, Source: leases.SourceCNI, ContainerID: "b", IfName: "eth0", Created: now, Expires: now.Add(time.Hour)},
		{MAC: "02:00:00:00:00:04", IP: netip.MustParseAddr("10.244.3.4"), State: leases.StateBound, Source: leases.SourceDHCP, Created: now, Expires: now.Add(time.Hour)},
	}}
	data, err := f.Encode()
	if err != nil {
		t.Fatal(err)
	}
	// A torn write in the middle of the second lease.
	lines := bytes.Split(data, []byte("\n"))
	lines[2] = lines[2][:len(lines[2])/2]
	damaged := bytes.Join(lines, []byte("\n"))
	dir := t.TempDir()
	path := filepath.Join(dir, "leases.json")
	if err := os.WriteFile(path, damaged, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Read(path); err == nil {
		t.Fatal("the damaged file reads")
	}

	got, header := leases.Salvage(damaged)
	if header.Subnet != subnet || header.Gateway != gw || header.Node != "node-a" {
		t.Errorf("header %+v, want the file's subnet, gateway and node", header)
	}
	var ips []string
	for _, l := range got {
		ips = append(ips, l.IP.String())
	}
	if strings.Join(ips, " ") != "10.244.3.2 10.244.3.4" {
		t.Errorf("salvaged %v, want the two leases whose lines are whole", ips)
	}

	s, err := leases.Open(path, subnet, gw)
	if err != nil {
		t.Fatal(err)
	}
	dup := append(got, got[0])
	if err := s.Replace(&leases.File{Leases: dup}, ""); err == nil || !strings.Contains(err.Error(), "held twice") {
		t.Errorf("Replace with an address twice = %v, want it refused", err)
	}
	keep := path + ".damaged"
	if err := s.Replace(&leases.File{Leases: got}, keep); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(keep); err != nil || !bytes.Equal(b, damaged) {
		t.Errorf("the damaged file was not kept: %v", err)
	}
	snap, err := leases.Read(path)
	if err != nil {
		t.Fatalf("the replaced file does not read: %v", err)
	}
	if n := len(snap.Leases()); n != 2 || snap.File.Subnet != subnet {
		t.Errorf("replaced file: %d leases in %s, want 2 in %s", n, snap.File.Subnet, subnet)
	}
	// The store works on it again.
	if _, err := s.Reserve(leases.ReserveRequest{Key: leases.Key{ContainerID: "c", IfName: "eth0"}, MAC: "02:00:00:00:00:09"}); err != nil {
		t.Errorf("Reserve after Replace: %v", err)
	}
}

// FuzzSalvage: whatever a damaged file holds, Salvage does not panic, and
// every lease it returns has a valid address, a canonical MAC, a state and
// a source, so Replace can take it.
func FuzzSalvage(f *testing.F) {
	f.Add([]byte(`{"version":1,"subnet":"10.244.3.0/24","gateway":"10.244.3.1","leases":[` + "\n" +
		`{"mac":"02:00:00:00:00:02","ip":"10.244.3.2","state":"reserved","source":"cni","containerID":"a","ifname":"eth0"},` + "\n" +
		`{"mac":"02:00:00:00:00:03","ip":"10.244.3.3","sta` + "\n]}\n"))
	f.Add([]byte("\x00garbage\n{\n},\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ls, _ := leases.Salvage(data)
		for _, l := range ls {
			if !l.IP.IsValid() || l.State == "" || l.Source == "" {
				t.Fatalf("salvaged an incomplete lease %+v", l)
			}
			if m, err := leases.NormalizeMAC(l.MAC); err != nil || m != l.MAC {
				t.Fatalf("salvaged MAC %q is not canonical", l.MAC)
			}
		}
	})
}

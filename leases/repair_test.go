package leases_test

import (
	"bytes"
	"errors"
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

	sv := leases.Salvage(damaged)
	got, header := sv.Leases, sv.Header
	if header.Subnet != subnet || header.Gateway != gw || header.Node != "node-a" || header.Version != leases.Version {
		t.Errorf("header %+v, want the file's version, subnet, gateway and node", header)
	}
	if len(sv.Lost) != 1 || !strings.HasPrefix(sv.Lost[0], "line 3: ") || !strings.Contains(sv.Lost[0], "02:00:00:00:00:03") {
		t.Errorf("lost %q, want the torn line 3 named", sv.Lost)
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
	if err := s.Replace(&leases.File{Leases: dup}, "", damaged); err == nil || !strings.Contains(err.Error(), "not valid") {
		t.Errorf("Replace with a lease twice = %v, want it refused", err)
	}
	keep := path + ".damaged"
	if err := s.Replace(&leases.File{Leases: got}, keep, damaged); err != nil {
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
		for _, l := range leases.Salvage(data).Leases {
			if !l.IP.IsValid() || l.State == "" || l.Source == "" {
				t.Fatalf("salvaged an incomplete lease %+v", l)
			}
			if m, err := leases.NormalizeMAC(l.MAC); l.MAC != "" && (err != nil || m != l.MAC) {
				t.Fatalf("salvaged MAC %q is not canonical", l.MAC)
			}
		}
	})
}

// TestReplaceRefusesAChangedFile: an ADD that commits between repair's
// read and its write is never overwritten: Replace finds the file is not
// the one read and writes nothing (ErrChanged), for a damaged file and
// for a missing one alike; run many times with the ADD racing.
func TestReplaceRefusesAChangedFile(t *testing.T) {
	subnet, gw := netip.MustParsePrefix("10.244.3.0/24"), netip.MustParseAddr("10.244.3.1")
	for _, tc := range []struct {
		name string
		was  []byte // nil: no file
	}{{"missing file", nil}, {"damaged file", []byte("{\"version\":1,\"subnet\":\"10.244.3.0/24\",\"leases\":[\n{\"ma")}} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range 50 {
				path := filepath.Join(t.TempDir(), "leases.json")
				if tc.was != nil {
					if err := os.WriteFile(path, tc.was, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				s, err := leases.Open(path, subnet, gw)
				if err != nil {
					t.Fatal(err)
				}
				if tc.was != nil {
					os.Remove(path) // the ADD below finds no damaged file
				}
				// The ADD races the repair's write: half the runs it
				// lands first, half after.
				added := make(chan error, 1)
				go func() {
					_, err := s.Reserve(leases.ReserveRequest{Key: leases.Key{ContainerID: "new", IfName: "eth0"}, MAC: "02:00:00:00:00:09"})
					added <- err
				}()
				if i%2 == 0 {
					if err := <-added; err != nil {
						t.Fatal(err)
					}
					added <- nil
				}
				rerr := s.Replace(&leases.File{}, "", tc.was)
				if err := <-added; err != nil {
					t.Fatal(err)
				}
				if rerr != nil && !errors.Is(rerr, leases.ErrChanged) {
					t.Fatalf("run %d: Replace = %v, want nil or ErrChanged", i, rerr)
				}
				// Whichever came first, the ADD's lease is there: Replace
				// either wrote before it or refused after it.
				if _, ok, err := s.Get(leases.Key{ContainerID: "new", IfName: "eth0"}); err != nil || !ok {
					t.Fatalf("run %d: the ADD's lease is gone after Replace (%v): %v %v", i, rerr, ok, err)
				}
				if i%2 == 0 && rerr == nil {
					t.Fatalf("run %d: Replace wrote over a file an ADD had written since it was read", i)
				}
			}
		})
	}
}

// TestValidateRefusesTwoHolders: one attachment with two leases, or one
// MAC held by two, is not a valid file (a DEL would free one and leave
// the other held); a declined dynamic lease does not hold its MAC, and a
// newer writer's lease follows its own rules.
func TestValidateRefusesTwoHolders(t *testing.T) {
	subnet := netip.MustParsePrefix("10.244.3.0/24")
	lease := func(ip, mac string, state leases.State, source leases.Source, cid string) leases.Lease {
		l := leases.Lease{IP: netip.MustParseAddr(ip), MAC: mac, State: state, Source: source, ContainerID: cid}
		if cid != "" {
			l.IfName = "eth0"
		}
		return l
	}
	for _, tc := range []struct {
		name string
		ls   []leases.Lease
		want string
	}{
		{"one attachment, two leases", []leases.Lease{
			lease("10.244.3.2", "02:00:00:00:00:02", leases.StateReserved, leases.SourceCNI, "a"),
			lease("10.244.3.3", "02:00:00:00:00:03", leases.StateReserved, leases.SourceCNI, "a")}, "attachment a/eth0 holds two leases"},
		{"one MAC, two leases", []leases.Lease{
			lease("10.244.3.2", "02:00:00:00:00:02", leases.StateReserved, leases.SourceCNI, "a"),
			lease("10.244.3.3", "02:00:00:00:00:02", leases.StateBound, leases.SourceDHCP, "")}, "mac 02:00:00:00:00:02 holds two leases"},
		{"a declined CNI reservation holds its MAC", []leases.Lease{
			lease("10.244.3.2", "02:00:00:00:00:02", leases.StateDeclined, leases.SourceCNI, "a"),
			lease("10.244.3.3", "02:00:00:00:00:02", leases.StateBound, leases.SourceDHCP, "")}, "holds two leases"},
		{"a declined dynamic lease does not", []leases.Lease{
			lease("10.244.3.2", "52:54:00:00:00:02", leases.StateDeclined, leases.SourceDHCP, ""),
			lease("10.244.3.3", "52:54:00:00:00:02", leases.StateBound, leases.SourceDHCP, "")}, ""},
		{"a newer writer's lease", []leases.Lease{
			lease("10.244.3.2", "52:54:00:00:00:02", "quarantined", leases.SourceDHCP, ""),
			lease("10.244.3.3", "52:54:00:00:00:02", leases.StateBound, leases.SourceDHCP, "")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &leases.File{Version: leases.Version, Subnet: subnet, Leases: tc.ls}
			data, err := f.Encode()
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "leases.json")
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err = leases.Read(path)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Read = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestSalvageKeepsWhatItDoesNotKnow: a newer writer's members of a lease
// and of the file survive Salvage, and the allocation cursor is read.
func TestSalvageKeepsWhatItDoesNotKnow(t *testing.T) {
	data := []byte(`{"version":1,"subnet":"10.244.3.0/24","gateway":"10.244.3.1","lastReserved":"10.244.3.7","future":{"x":1},"leases":[` + "\n" +
		`{"mac":"02:00:00:00:00:02","ip":"10.244.3.2","state":"parked","source":"cni","containerID":"a","ifname":"eth0","zone":"b"},` + "\n" +
		`{"mac":"02:00:00:00:00:03","ip":"10.244.3.3","sta` + "\n")
	sv := leases.Salvage(data)
	if len(sv.Leases) != 1 || sv.Leases[0].Known() || !strings.Contains(sv.Leases[0].Unknown.String(), `"zone":"b"`) {
		t.Fatalf("salvaged %+v, want the newer writer's lease with its member zone", sv.Leases)
	}
	// A declined address no client named has no MAC, and is kept.
	declined := leases.Salvage([]byte(`{"version":1,"subnet":"10.244.3.0/24","leases":[` + "\n" +
		`{"ip":"10.244.3.9","state":"declined","source":"dhcp","expires":"2026-11-26T12:00:00Z"}]}` + "\n"))
	if len(declined.Leases) != 1 || len(declined.Lost) != 0 {
		t.Errorf("a declined lease without a MAC: salvaged %+v, lost %q; want it kept", declined.Leases, declined.Lost)
	}
	if !strings.Contains(sv.Header.Unknown.String(), `"future"`) || sv.Header.LastReserved != netip.MustParseAddr("10.244.3.7") {
		t.Errorf("header %+v, want its unknown member future and the cursor 10.244.3.7", sv.Header)
	}
	// A file of a newer format: its version is known, nothing else need be.
	if v := leases.Salvage([]byte(`{"version":3,"subnet":"10.244.3.0/24","leases":[` + "\n")).Header.Version; v != 3 {
		t.Errorf("a version 3 header reads as version %d", v)
	}
}

package leases

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// bootpdEntry is one record of bootpd's lease file, live until 2038.
func bootpdEntry(name, ip, hw string) string {
	return "{\n\tname=" + name + "\n\tip_address=" + ip + "\n\thw_address=" + hw + "\n\tlease=0x7fffffff\n}\n"
}

// duidLLOf is bootpd's spelling of an RFC 4361 client identifier: IAID
// 1:2:3:4, then a DUID-LL (type 3, hardware type 1) with mac's octets.
func duidLLOf(mac string) string {
	var octets []string
	for _, o := range strings.Split(mac, ":") {
		octets = append(octets, strings.TrimLeft(o, "0"))
	}
	for i, o := range octets {
		if o == "" {
			octets[i] = "0"
		}
	}
	return "ff,1:2:3:4:0:3:0:1:" + strings.Join(octets, ":")
}

// TestBootpdForgedClientID: a guest that sends a DUID-LL with its
// neighbour's MAC gets a bootpd record naming that MAC. A record keyed by
// the hardware address wins, whichever is newer; two records keyed by
// identifiers that name one MAC with different addresses give no answer
// (and FindIP asks no ARP table then, where the forger may be); the same
// address twice is one answer.
func TestBootpdForgedClientID(t *testing.T) {
	const victim = "52:54:00:ab:cd:01"
	for _, tc := range []struct {
		name, file string
		ip         string // "" is no answer
		ambiguous  bool
	}{
		{"hardware address beats a newer forged identifier",
			bootpdEntry("attacker", "192.168.64.9", duidLLOf(victim)) + bootpdEntry("victim", "192.168.64.5", "1,52:54:0:ab:cd:1"), "192.168.64.5", false},
		{"hardware address beats an older forged identifier",
			bootpdEntry("victim", "192.168.64.5", "1,52:54:0:ab:cd:1") + bootpdEntry("attacker", "192.168.64.9", duidLLOf(victim)), "192.168.64.5", false},
		{"two identifiers, two addresses",
			bootpdEntry("attacker", "192.168.64.9", duidLLOf(victim)) + bootpdEntry("victim", "192.168.64.5", duidLLOf(victim)), "", true},
		{"one identifier", bootpdEntry("victim", "192.168.64.5", duidLLOf(victim)), "192.168.64.5", false},
		{"the same address twice",
			bootpdEntry("victim", "192.168.64.5", duidLLOf(victim)) + bootpdEntry("victim-old", "192.168.64.5", duidLLOf(victim)), "192.168.64.5", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls, err := ParseBootpd(strings.NewReader(tc.file))
			if err != nil {
				t.Fatal(err)
			}
			s := NewSnapshot(File{Leases: ls})
			l, err := s.LookupMAC(victim)
			switch {
			case tc.ip != "" && (err != nil || l.IP.String() != tc.ip):
				t.Errorf("LookupMAC = %v, %v; want %s", l.IP, err, tc.ip)
			case tc.ambiguous && !errors.Is(err, ErrAmbiguousMAC):
				t.Errorf("LookupMAC = %v, %v; want ErrAmbiguousMAC", l.IP, err)
			case tc.ambiguous && !strings.Contains(err.Error(), "192.168.64.9 (attacker)"):
				t.Errorf("LookupMAC's reason %q names not the records", err)
			}
			if _, ok := s.ByMAC(victim); ok != (tc.ip != "") {
				t.Errorf("ByMAC ok = %v", ok)
			}
			path := filepath.Join(t.TempDir(), "dhcpd_leases")
			if err := os.WriteFile(path, []byte(tc.file), 0o644); err != nil {
				t.Fatal(err)
			}
			arpTable = func() ([]Neighbor, error) { return ParseARPDump(arpDump()) }
			ifAddrs = testIfAddrs
			t.Cleanup(func() { arpTable, ifAddrs = readARP, interfaceAddrs })
			ip, from, ok, err := FindIP(path, victim)
			if tc.ambiguous {
				if ok || !errors.Is(err, ErrAmbiguousMAC) {
					t.Errorf("FindIP = %v from %q, %v, %v; want no answer and ErrAmbiguousMAC", ip, from, ok, err)
				}
				return
			}
			if !ok || err != nil || ip.String() != tc.ip || from != "lease" {
				t.Errorf("FindIP = %v from %q, %v, %v; want %s from the lease", ip, from, ok, err, tc.ip)
			}
		})
	}
}

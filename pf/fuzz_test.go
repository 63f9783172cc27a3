package pf

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzEditPlist feeds EditPlist whatever a vmnet plist on disk could hold:
// it must never panic, and whatever it accepts it must write back so that
// the values read as set and a second edit changes nothing. The seeds are
// the plists in testdata/.
func FuzzEditPlist(f *testing.F) {
	for _, name := range []string{"vmnet-xml.plist", "vmnet-binary.plist", "vmnet-xml.plist.golden"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{ Shared_Net_Address = "192.168.64.1"; }`))
	f.Add([]byte{})
	want := SharedNet{Address: "10.244.5.1", Mask: "255.255.255.0"}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, _, err := EditPlist(data, want)
		if err != nil {
			return
		}
		got, err := ReadSharedNet(out)
		if err != nil || got != want {
			t.Fatalf("edited plist reads %+v, %v", got, err)
		}
		again, changed, err := EditPlist(out, want)
		if err != nil || changed || !bytes.Equal(again, out) {
			t.Fatalf("second edit: changed %v, err %v", changed, err)
		}
	})
}

// FuzzEditBootpdPlist feeds EditBootpdPlist what a bootpd plist on disk
// could hold, as FuzzEditPlist does EditPlist: no panic, and what it
// accepts it writes back so that the key reads as set and a second edit
// changes nothing.
func FuzzEditBootpdPlist(f *testing.F) {
	data, err := os.ReadFile(filepath.Join("testdata", "bootpd-sharing.plist"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte(`{ dhcp_ignore_client_identifier = 0; name = "\U00a79e7"; }`))
	f.Add([]byte{})
	want := Previous{Value: true}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, _, err := EditBootpdPlist(data, want)
		if err != nil {
			return
		}
		if got, present, err := ReadIgnoreClientID(out); err != nil || !present || !got {
			t.Fatalf("edited plist reads %v (present %v), %v", got, present, err)
		}
		again, changed, err := EditBootpdPlist(out, want)
		if err != nil || changed || !bytes.Equal(again, out) {
			t.Fatalf("second edit: changed %v, err %v", changed, err)
		}
	})
}

// FuzzParseShownRules: pfctl's output is read back on every resync.
func FuzzParseShownRules(f *testing.F) {
	f.Add("No ALTQ support in kernel\nno nat inet from 10.244.5.0/24 to 10.244.0.0/16\n")
	f.Fuzz(func(t *testing.T, out string) {
		for _, r := range ParseShownRules(out) {
			if r == "" {
				t.Fatal("empty rule")
			}
		}
	})
}

package pf

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"howett.net/plist"
)

var podCIDR = netip.MustParsePrefix("10.244.5.0/24")

// decoded is a plist as a comparable value: every key's value, typed.
func decoded(t *testing.T, data []byte) (map[string]any, int) {
	t.Helper()
	var v map[string]any
	format, err := plist.Unmarshal(data, &v)
	if err != nil {
		t.Fatal(err)
	}
	return v, format
}

// xmlOf renders any plist as XML, so a binary result can be golden-tested
// readably.
func xmlOf(t *testing.T, data []byte) []byte {
	t.Helper()
	v, _ := decoded(t, data)
	out, err := plist.MarshalIndent(v, plist.XMLFormat, "\t")
	if err != nil {
		t.Fatal(err)
	}
	return append(out, '\n')
}

func TestSharedNetFor(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want SharedNet
	}{
		{"10.244.5.0/24", SharedNet{"10.244.5.1", "255.255.255.0"}},
		{"10.244.8.0/22", SharedNet{"10.244.8.1", "255.255.252.0"}},
		{"172.16.0.0/12", SharedNet{"172.16.0.1", "255.240.0.0"}},
		{"192.168.7.8/30", SharedNet{"192.168.7.9", "255.255.255.252"}},
	} {
		got, err := SharedNetFor(netip.MustParsePrefix(tc.in))
		if err != nil || got != tc.want {
			t.Errorf("SharedNetFor(%s) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"10.244.5.1/24", "10.244.5.0/31", "fd00::/64", "10.0.0.0/7"} {
		if _, err := SharedNetFor(netip.MustParsePrefix(bad)); err == nil {
			t.Errorf("SharedNetFor(%s) accepted", bad)
		}
	}
}

func TestPlistEditGolden(t *testing.T) {
	want, _ := SharedNetFor(podCIDR)
	for _, tc := range []struct {
		input, golden string
		format        int
	}{
		{"vmnet-xml.plist", "vmnet-xml.plist.golden", plist.XMLFormat},
		{"vmnet-binary.plist", "vmnet-binary.plist.golden", plist.BinaryFormat},
		{"", "vmnet-absent.plist.golden", plist.XMLFormat},
	} {
		var in []byte
		if tc.input != "" {
			var err error
			if in, err = os.ReadFile(filepath.Join("testdata", tc.input)); err != nil {
				t.Fatal(err)
			}
		}
		out, changed, err := EditPlist(in, want)
		if err != nil || !changed {
			t.Fatalf("%s: EditPlist = changed %v, %v", tc.input, changed, err)
		}
		got, format := decoded(t, out)
		if format != tc.format {
			t.Errorf("%s: written as %s, want %s", tc.input, plist.FormatNames[format], plist.FormatNames[tc.format])
		}
		// Only the two keys differ; every other key keeps its value
		// and type (int64 -7, uint64 42, float64 1.5, []byte, time).
		if in != nil {
			before, _ := decoded(t, in)
			before[KeyAddress], before[KeyMask] = want.Address, want.Mask
			if diff := cmp.Diff(before, got); diff != "" {
				t.Errorf("%s: foreign keys changed (-want +got):\n%s", tc.input, diff)
			}
		}
		if format == plist.BinaryFormat {
			golden(t, tc.golden, xmlOf(t, out))
		} else {
			golden(t, tc.golden, out)
		}
		// Idempotent: a second edit changes nothing and returns the
		// same bytes, so the file is not rewritten.
		again, changed, err := EditPlist(out, want)
		if err != nil || changed || !bytes.Equal(again, out) {
			t.Errorf("%s: second EditPlist changed=%v err=%v", tc.input, changed, err)
		}
	}
}

func TestPlistEditOpenStep(t *testing.T) {
	in := []byte(`{ Shared_Net_Address = "192.168.64.1"; Other = (1, 2); }`)
	out, changed, err := EditPlist(in, SharedNet{"10.244.5.1", "255.255.255.0"})
	if err != nil || !changed {
		t.Fatal(changed, err)
	}
	v, format := decoded(t, out)
	if format != plist.OpenStepFormat && format != plist.GNUStepFormat {
		t.Errorf("format %s", plist.FormatNames[format])
	}
	if v[KeyAddress] != "10.244.5.1" || v[KeyMask] != "255.255.255.0" || len(v["Other"].([]any)) != 2 {
		t.Errorf("edited: %v", v)
	}
}

func TestPlistEditRejects(t *testing.T) {
	for _, in := range []string{"not a plist at all <", `<?xml version="1.0"?><plist><array><string>x</string></array></plist>`} {
		if _, _, err := EditPlist([]byte(in), SharedNet{"10.244.5.1", "255.255.255.0"}); err == nil {
			t.Errorf("EditPlist(%q) accepted", in)
		}
	}
}

func TestPlistNonStringValueReplaced(t *testing.T) {
	in := []byte(`<?xml version="1.0"?><plist version="1.0"><dict><key>Shared_Net_Address</key><integer>3</integer><key>Shared_Net_Mask</key><string>255.255.255.0</string></dict></plist>`)
	out, changed, err := EditPlist(in, SharedNet{"10.244.5.1", "255.255.255.0"})
	if err != nil || !changed {
		t.Fatal(changed, err)
	}
	if v, _ := decoded(t, out); v[KeyAddress] != "10.244.5.1" {
		t.Errorf("address = %#v", v[KeyAddress])
	}
}

// TestApplyPlistAndRestore is the file life: vmlaned writes the plist once
// (a second start does not rewrite it), a podCIDR change keeps the
// original values on record, and teardown puts them back.
func TestApplyPlistAndRestore(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "com.apple.vmnet.plist")
	state := filepath.Join(dir, "vmnet.json")
	orig, _ := os.ReadFile("testdata/vmnet-binary.plist")
	os.WriteFile(path, orig, 0o640)

	if changed, err := ApplyPlist(path, state, podCIDR); !changed || err != nil {
		t.Fatalf("first ApplyPlist = %v, %v", changed, err)
	}
	fi1, _ := os.Stat(path)
	if fi1.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want the file's own 0640", fi1.Mode().Perm())
	}
	if changed, err := ApplyPlist(path, state, podCIDR); changed || err != nil {
		t.Fatalf("second ApplyPlist = %v, %v; want no write", changed, err)
	}
	if changed, err := ApplyPlist(path, state, netip.MustParsePrefix("10.244.9.0/24")); !changed || err != nil {
		t.Fatalf("new podCIDR ApplyPlist = %v, %v", changed, err)
	}
	data, _ := os.ReadFile(path)
	if sn, _ := ReadSharedNet(data); sn != (SharedNet{"10.244.9.1", "255.255.255.0"}) {
		t.Errorf("plist says %+v", sn)
	}
	done, err := RestoreVmnet(state)
	if err != nil || len(done) != 1 || !strings.Contains(done[0], "restored") {
		t.Fatalf("RestoreVmnet = %q, %v", done, err)
	}
	data, _ = os.ReadFile(path)
	if diff := cmp.Diff(must(decoded(t, orig)), must(decoded(t, data))); diff != "" {
		t.Errorf("restored plist differs from the original (-orig +restored):\n%s", diff)
	}
	if _, format := decoded(t, data); format != plist.BinaryFormat {
		t.Errorf("restored as %s", plist.FormatNames[format])
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("state file left: %v", err)
	}
}

func must(v map[string]any, _ int) map[string]any { return v }

func TestRestoreRemovesKeysThatWereAbsent(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "com.apple.vmnet.plist")
	state := filepath.Join(dir, "vmnet.json")
	if _, err := ApplyPlist(path, state, podCIDR); err != nil { // no plist yet
		t.Fatal(err)
	}
	if _, err := RestoreVmnet(state); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	if v, _ := decoded(t, data); len(v) != 0 {
		t.Errorf("after restore: %v, want an empty dictionary", v)
	}
}

func TestRestoreLeavesSomeoneElsesValues(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "com.apple.vmnet.plist")
	state := filepath.Join(dir, "vmnet.json")
	orig, _ := os.ReadFile("testdata/vmnet-xml.plist")
	os.WriteFile(path, orig, 0o644)
	ApplyPlist(path, state, podCIDR)
	data, _ := os.ReadFile(path)
	edited, _, _ := EditPlist(data, SharedNet{"192.168.99.1", "255.255.255.0"}) // by hand
	os.WriteFile(path, edited, 0o644)
	done, err := RestoreVmnet(state)
	if err != nil || len(done) != 1 || !strings.Contains(done[0], "left") {
		t.Fatalf("RestoreVmnet = %q, %v", done, err)
	}
	if now, _ := os.ReadFile(path); !bytes.Equal(now, edited) {
		t.Error("someone else's values were overwritten")
	}
}

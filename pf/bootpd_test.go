package pf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"howett.net/plist"
)

// TestEditBootpdPlist sets the key in a plist shaped as InternetSharing
// writes it (testdata/bootpd-sharing.plist, a Subnets entry per shared
// interface) and in the other formats bootpd reads, every other key kept.
func TestEditBootpdPlist(t *testing.T) {
	orig, err := os.ReadFile("testdata/bootpd-sharing.plist")
	if err != nil {
		t.Fatal(err)
	}
	out, changed, err := EditBootpdPlist(orig, Previous{Value: true})
	if err != nil || !changed {
		t.Fatalf("EditBootpdPlist = %v, %v", changed, err)
	}
	golden(t, "bootpd-sharing.plist.golden", out)
	before, after := must(decoded(t, orig)), must(decoded(t, out))
	if after[KeyIgnoreClientID] != true {
		t.Errorf("%s = %v, want true", KeyIgnoreClientID, after[KeyIgnoreClientID])
	}
	delete(after, KeyIgnoreClientID)
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("other keys changed (-before +after):\n%s", diff)
	}
	if again, changed, err := EditBootpdPlist(out, Previous{Value: true}); err != nil || changed || string(again) != string(out) {
		t.Errorf("second edit: changed %v, %v", changed, err)
	}
	back, changed, err := EditBootpdPlist(out, Previous{Absent: true})
	if err != nil || !changed {
		t.Fatalf("removing the key: %v, %v", changed, err)
	}
	if diff := cmp.Diff(before, must(decoded(t, back))); diff != "" {
		t.Errorf("after removing the key (-orig +got):\n%s", diff)
	}

	// bootpd reads a number as a boolean (my_CFTypeToNumber): 1 already
	// says true, 0 does not.
	for _, tc := range []struct {
		value   any
		changed bool
	}{{uint64(1), false}, {uint64(0), true}, {true, false}, {false, true}, {"yes", true}} {
		in, err := plist.Marshal(map[string]any{KeyIgnoreClientID: tc.value, "bootp_enabled": false}, plist.BinaryFormat)
		if err != nil {
			t.Fatal(err)
		}
		out, changed, err := EditBootpdPlist(in, Previous{Value: true})
		if err != nil || changed != tc.changed {
			t.Errorf("%T %v: changed %v, %v; want %v", tc.value, tc.value, changed, err, tc.changed)
			continue
		}
		if v, format := decoded(t, out); format != plist.BinaryFormat || v["bootp_enabled"] != false {
			t.Errorf("%v: wrote %s %v", tc.value, plist.FormatNames[format], v)
		}
	}
	if _, _, err := EditBootpdPlist([]byte("<plist><array/></plist>"), Previous{Value: true}); err == nil {
		t.Error("a plist whose root is no dictionary was edited")
	}
}

// TestApplyAndRestoreBootpdPlist: vmlaned sets the key, InternetSharing
// writes the file again without it and vmlaned sets it again, and the
// teardown puts back what the file said before vmlane first touched it.
func TestApplyAndRestoreBootpdPlist(t *testing.T) {
	dir := t.TempDir()
	path, state := filepath.Join(dir, "bootpd.plist"), filepath.Join(dir, "vmnet.json")
	if changed, err := ApplyBootpdPlist(path, state); changed || err != nil {
		t.Fatalf("no plist yet: ApplyBootpdPlist = %v, %v; want nothing done", changed, err)
	}
	orig, _ := os.ReadFile("testdata/bootpd-sharing.plist")
	os.WriteFile(path, orig, 0o644)
	if changed, err := ApplyBootpdPlist(path, state); !changed || err != nil {
		t.Fatalf("ApplyBootpdPlist = %v, %v", changed, err)
	}
	if changed, err := ApplyBootpdPlist(path, state); changed || err != nil {
		t.Fatalf("second ApplyBootpdPlist = %v, %v; want no write", changed, err)
	}
	os.WriteFile(path, orig, 0o644) // InternetSharing starts the shared network again
	if changed, err := ApplyBootpdPlist(path, state); !changed || err != nil {
		t.Fatalf("after InternetSharing's rewrite: ApplyBootpdPlist = %v, %v", changed, err)
	}
	done, err := RestoreVmnet(state)
	if err != nil || len(done) != 1 || !strings.Contains(done[0], "restored "+KeyIgnoreClientID) || !strings.Contains(done[0], "to absent") {
		t.Fatalf("RestoreVmnet = %q, %v", done, err)
	}
	data, _ := os.ReadFile(path)
	if diff := cmp.Diff(must(decoded(t, orig)), must(decoded(t, data))); diff != "" {
		t.Errorf("restored plist (-orig +restored):\n%s", diff)
	}

	// A key someone set to false after vmlane: theirs, left alone.
	os.WriteFile(path, orig, 0o644)
	ApplyBootpdPlist(path, state)
	data, _ = os.ReadFile(path)
	theirs, _, _ := EditBootpdPlist(data, Previous{Value: false})
	os.WriteFile(path, theirs, 0o644)
	done, err = RestoreVmnet(state)
	if err != nil || len(done) != 1 || !strings.Contains(done[0], "left") {
		t.Fatalf("RestoreVmnet = %q, %v", done, err)
	}
	if now, _ := os.ReadFile(path); string(now) != string(theirs) {
		t.Error("someone else's value was overwritten")
	}
}

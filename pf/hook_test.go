package pf

import (
	"strings"
	"testing"

	"github.com/vmlane/vmlane/internal/atomicfile"
)

func TestCheckHook(t *testing.T) {
	const stock = "nat-anchor \"com.apple/*\" all\nrdr-anchor \"com.apple/*\" all\n"
	for _, tc := range []struct{ name, nat, want string }{
		{"stock pf.conf", stock, ""},
		{"with vmnet's sharing after the hook", stock + "nat-anchor \"com.apple.internet-sharing/*\" all\n", ""},
		{"bare hook line", "nat-anchor \"com.apple/*\"\n", ""},
		{"ruleset replaced", "nat on en0 from 10.0.0.0/8 to any -> (en0)\n", "has no nat-anchor"},
		{"empty", "", "has no nat-anchor"},
		{"another anchor only", "nat-anchor \"com.apple.other/*\" all\n", "has no nat-anchor"},
		{"sharing first", "nat-anchor \"com.apple.internet-sharing/*\" all\n" + stock, "before nat-anchor"},
	} {
		err := CheckHook(tc.nat)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: CheckHook = %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestPFCheckHook reads the main ruleset through pfctl as vmlaned does:
// macOS's stock ruleset passes; one another tool loaded in its place, or
// one with InternetSharing's NAT ahead of the hook, is reported, while the
// anchor's own rules still read back fine.
func TestPFCheckHook(t *testing.T) {
	f := newFakePfctl()
	p, err := New(DefaultAnchor, f, t.TempDir()+"/pf.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Ensure([]string{"no nat inet from 10.244.5.0/24 to 10.244.0.0/16"}, true); err != nil {
		t.Fatal(err)
	}
	if err := p.CheckHook(); err != nil {
		t.Errorf("stock ruleset: %v", err)
	}
	if got := f.calls[len(f.calls)-1]; got != "pfctl -s nat" {
		t.Errorf("CheckHook ran %q, want pfctl -s nat", got)
	}
	f.main = []string{"nat on en0 inet from 192.168.64.0/24 to any -> (en0)"}
	if err := p.CheckHook(); err == nil || !strings.Contains(err.Error(), "has no nat-anchor") {
		t.Errorf("replaced ruleset: %v", err)
	}
	if changed, err := p.Ensure([]string{"no nat inet from 10.244.5.0/24 to 10.244.0.0/16"}, true); changed || err != nil {
		t.Errorf("the anchor itself reads back fine meanwhile: changed %v, %v", changed, err)
	}
	f.main = []string{`nat-anchor "com.apple.internet-sharing/*" all`, `nat-anchor "com.apple/*" all`}
	if err := p.CheckHook(); err == nil || !strings.Contains(err.Error(), "before nat-anchor") {
		t.Errorf("sharing first: %v", err)
	}
	f.failOn = "pfctl -s nat"
	if err := p.CheckHook(); err == nil || !strings.Contains(err.Error(), "reading pf's main ruleset") {
		t.Errorf("pfctl failing: %v", err)
	}
}

// TestStateFolderMade: on a fresh Mac /var/db/vmlane does not exist; the
// state and vmnet files make their folder.
func TestStateFolderMade(t *testing.T) {
	path := t.TempDir() + "/var/db/vmlane/pf.json"
	if err := atomicfile.WriteFileAll(path, []byte("{}\n"), 0o600); err != nil {
		t.Fatalf("writing into a folder that does not exist yet: %v", err)
	}
}

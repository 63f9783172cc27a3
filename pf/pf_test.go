package pf

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, rewriting it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s (-golden +got):\n%s", path, diff)
	}
}

func pfx(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, x := range s {
		out = append(out, netip.MustParsePrefix(x))
	}
	return out
}

func TestPFAnchorGolden(t *testing.T) {
	var b strings.Builder
	for _, tc := range []struct {
		name    string
		pod     netip.Prefix
		cluster []netip.Prefix
	}{
		{"cluster CIDR", netip.MustParsePrefix("10.244.5.0/24"), pfx("10.244.0.0/16")},
		{"every pod subnet (no --cluster-cidr), IPv6 ones skipped", netip.MustParsePrefix("10.244.5.0/24"), pfx("10.244.0.0/22", "10.244.4.0/23", "fd00:244::/56")},
		{"IPv6 pod subnet", netip.MustParsePrefix("fd00:244:0:5::/64"), pfx("10.244.0.0/16", "fd00:244::/56")},
		{"no podCIDR yet", netip.Prefix{}, pfx("10.244.0.0/16")},
	} {
		fmt.Fprintf(&b, "## %s\n%s\n", tc.name, RenderAnchor(NoNATRules(tc.pod, tc.cluster)))
	}
	golden(t, "anchor.golden", []byte(b.String()))
}

func TestValidAnchor(t *testing.T) {
	for _, ok := range []string{"com.apple/vmlane", "com.apple/250.vmlane", "com.apple/vm_lane/v-1"} {
		if err := ValidAnchor(ok); err != nil {
			t.Errorf("ValidAnchor(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "vmlane", "com.apple", "com.apple/", "com.apple/*", "com.apple//x", "com.apple/a b", "other/vmlane", `com.apple/"x"`} {
		if err := ValidAnchor(bad); err == nil {
			t.Errorf("ValidAnchor(%q) accepted", bad)
		}
	}
}

func TestParseShownRules(t *testing.T) {
	out := "No ALTQ support in kernel\nALTQ related functions disabled\nno nat inet from 10.244.5.0/24 to 10.244.0.0/16\n  nat on en0 inet from 192.168.64.0/24 to any -> (en0) round-robin\n\n"
	want := []string{"no nat inet from 10.244.5.0/24 to 10.244.0.0/16", "nat on en0 inet from 192.168.64.0/24 to any -> (en0) round-robin"}
	if diff := cmp.Diff(want, ParseShownRules(out)); diff != "" {
		t.Error(diff)
	}
}

// TestPfctlGolden runs vmlaned's pf life against the recording fake and
// compares every command and the resulting state with the golden file:
// enable, load, the no-op passes, a rule change, repairs after someone
// else's edits, a restart, and teardown.
func TestPfctlGolden(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "pf.json")
	f := newFakePfctl()
	var b strings.Builder
	step := func(name string, fn func() (string, error)) {
		f.calls = nil
		res, err := fn()
		fmt.Fprintf(&b, "## %s\n", name)
		for _, c := range f.calls {
			fmt.Fprintf(&b, "$ %s\n", c)
		}
		fmt.Fprintf(&b, "-> %s err=%v\n%s\n", res, err, f)
	}
	p, err := New(DefaultAnchor, f, state)
	if err != nil {
		t.Fatal(err)
	}
	rules := NoNATRules(netip.MustParsePrefix("10.244.5.0/24"), pfx("10.244.0.0/16"))
	step("enable: a reference of vmlane's own", func() (string, error) { n, err := p.Enable(); return fmt.Sprint("new=", n), err })
	step("first reconcile loads the anchor", func() (string, error) { c, err := p.Ensure(rules, false); return fmt.Sprint("loaded=", c), err })
	step("same rules, event pass: no pfctl at all", func() (string, error) { c, err := p.Ensure(rules, false); return fmt.Sprint("loaded=", c), err })
	step("same rules, resync pass: read back, nothing to load", func() (string, error) { c, err := p.Ensure(rules, true); return fmt.Sprint("loaded=", c), err })
	wider := NoNATRules(netip.MustParsePrefix("10.244.5.0/24"), pfx("10.244.0.0/16", "10.96.0.0/12"))
	step("rules change: reloaded whole", func() (string, error) { c, err := p.Ensure(wider, false); return fmt.Sprint("loaded=", c), err })
	f.anchors[DefaultAnchor] = []string{"no nat inet from 10.244.5.0/24 to 10.244.0.0/16"}
	step("someone edited the anchor: resync reloads it", func() (string, error) { c, err := p.Ensure(wider, true); return fmt.Sprint("loaded=", c), err })
	f.refs = nil // pfctl -d: every reference gone
	step("pf disabled behind vmlane's back: resync takes a new reference", func() (string, error) { c, err := p.Ensure(wider, true); return fmt.Sprint("loaded=", c), err })
	p2, err := New(DefaultAnchor, f, state)
	if err != nil {
		t.Fatal(err)
	}
	step("restart: the saved token is still held, no new reference", func() (string, error) { n, err := p2.Enable(); return fmt.Sprint("new=", n), err })
	step("teardown: flush the anchor only, release the token", func() (string, error) {
		done, err := Teardown(f, state)
		return strings.Join(done, "; "), err
	})
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("state file left after teardown: %v", err)
	}
	step("teardown again: nothing left to release", func() (string, error) {
		done, err := Teardown(f, state)
		return strings.Join(done, "; "), err
	})
	got := b.String()
	for _, forbidden := range []string{"pfctl -d", "-F all", "pfctl -f /etc/pf.conf", "pfctl -a  "} {
		if strings.Contains(got, forbidden) {
			t.Errorf("vmlane ran %q", forbidden)
		}
	}
	golden(t, "pfctl.golden", []byte(got))
}

func TestPfctlLoadFailureRetried(t *testing.T) {
	f := newFakePfctl()
	p, _ := New(DefaultAnchor, f, filepath.Join(t.TempDir(), "pf.json"))
	rules := NoNATRules(netip.MustParsePrefix("10.244.5.0/24"), pfx("10.244.0.0/16"))
	f.failOn = "pfctl -a com.apple/vmlane -f -"
	if _, err := p.Ensure(rules, false); err == nil || !strings.Contains(err.Error(), "loading pf anchor com.apple/vmlane") {
		t.Fatalf("err = %v", err)
	}
	f.failOn = ""
	// Not marked applied: the next event pass tries again.
	if loaded, err := p.Ensure(rules, false); !loaded || err != nil {
		t.Fatalf("retry = %v, %v", loaded, err)
	}
}

func TestNewRejectsBadAnchor(t *testing.T) {
	if _, err := New("vmlane", newFakePfctl(), filepath.Join(t.TempDir(), "pf.json")); err == nil {
		t.Error("anchor outside com.apple/ accepted")
	}
}

// TestPfTokenReusedAfterDisable: xnu makes a token's value from its
// allocation's address and frees every token on `pfctl -d`, so another
// holder's next token can carry the value vmlane saved. vmlane tells its
// own from that one by the creation time the listing implies: after a
// -d and someone else's -E with the same value, it takes a reference of
// its own again, and teardown releases only that one, never the other
// holder's.
func TestPfTokenReusedAfterDisable(t *testing.T) {
	f := newFakePfctl()
	clock := now
	now = func() time.Time { return f.now }
	t.Cleanup(func() { now = clock })
	state := filepath.Join(t.TempDir(), "pf.json")
	p, err := New(DefaultAnchor, f, state)
	if err != nil {
		t.Fatal(err)
	}
	if fresh, err := p.Enable(); err != nil || !fresh || p.Token() != "20001" {
		t.Fatalf("Enable = %v, %v, token %s; want a new reference 20001", fresh, err, p.Token())
	}
	f.now = f.now.Add(90 * time.Second)
	if fresh, err := p.Enable(); err != nil || fresh {
		t.Fatalf("Enable 90 s later = %v, %v; want the reference still held", fresh, err)
	}
	// Someone runs pfctl -d (every token freed), then another holder
	// pfctl -E and gets the freed slot: the same value.
	f.refs = nil
	f.nextToken = 20001
	f.now = f.now.Add(30 * time.Second)
	if _, err := f.Run("", "pfctl", "-E"); err != nil {
		t.Fatal(err)
	}
	f.now = f.now.Add(time.Second)
	if fresh, err := p.Enable(); err != nil || !fresh || p.Token() != "20002" {
		t.Fatalf("Enable after -d and a reuse = %v, %v, token %s; want a new reference of vmlane's own, 20002", fresh, err, p.Token())
	}
	done, err := Teardown(f, state)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.refs, []string{"20001"}) {
		t.Errorf("references after teardown %v, want the other holder's 20001 alone (done: %v)", f.refs, done)
	}
	// A state file from before creation times were kept: its token can
	// not be told from a reuse, so it is neither trusted nor released.
	os.WriteFile(state, []byte(`{"version": 1, "anchor": "com.apple/vmlane", "token": "20001"}`+"\n"), 0o600)
	done, err = Teardown(f, state)
	if err != nil || !slices.Equal(f.refs, []string{"20001"}) || !strings.Contains(strings.Join(done, "; "), "left alone") {
		t.Errorf("teardown of an undated token: %v, %v, references %v; want it left alone", done, err, f.refs)
	}
}

// TestPfAgesNotUnderstood: a pfctl whose ages do not mean what heldBy
// takes them for (every token a day older than it is) makes Enable say so
// once and fall back to the value, rather than take a new reference at
// every full pass.
func TestPfAgesNotUnderstood(t *testing.T) {
	f := newFakePfctl()
	f.skew = 24 * time.Hour
	clock := now
	now = func() time.Time { return f.now }
	t.Cleanup(func() { now = clock })
	p, err := New(DefaultAnchor, f, filepath.Join(t.TempDir(), "pf.json"))
	if err != nil {
		t.Fatal(err)
	}
	if fresh, err := p.Enable(); !fresh || err == nil || !strings.Contains(err.Error(), "by the value alone") {
		t.Fatalf("Enable = %v, %v; want a new reference and the ages reported not understood", fresh, err)
	}
	for range 3 {
		f.now = f.now.Add(30 * time.Second)
		if fresh, err := p.Enable(); fresh || err != nil {
			t.Fatalf("Enable again = %v, %v; want the reference held by its value", fresh, err)
		}
	}
	if len(f.refs) != 2 {
		t.Errorf("references %v, want Internet Sharing's and one of vmlane's", f.refs)
	}
}

func TestHeldBy(t *testing.T) {
	created := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	at := created.Add(66 * time.Second)
	const refs = "TOKENS:\nPID      Process Name                TOKEN                     TIMESTAMP\n" +
		"4063     pfctl                       15053025338191571182      0 days 00:01:06\n" +
		"4070     pfctl                       777                       0 days 00:00:03\n"
	for _, tc := range []struct {
		name, token string
		created     time.Time
		want        bool
	}{
		{"listed, of the age recorded", "15053025338191571182", created, true},
		{"listed, created 2 s off (pfctl's rounding)", "15053025338191571182", created.Add(2 * time.Second), true},
		{"the value, but another holder's (younger)", "777", created, false},
		{"not listed", "42", created, false},
		{"no creation time recorded", "15053025338191571182", time.Time{}, false},
		{"a listing with no age", "99", created, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := refs + "4080     pfctl                       99\n"
			if got := heldBy(r, tc.token, tc.created, at); got != tc.want {
				t.Errorf("heldBy(%s) = %v, want %v", tc.token, got, tc.want)
			}
		})
	}
	if heldBy("No pf starter references held\n", "777", created, at) {
		t.Error("a token held with no references listed")
	}
}

package bridge

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/privtest"
)

// TestNoLinkLocalLearn: Ensure makes a bridge that learns nothing from
// link-local frames, and adopts an existing bridge the same way;
// EnsureNoLinkLocalLearn puts the option back when someone turns it off,
// and says so once.
func TestNoLinkLocalLearn(t *testing.T) {
	privtest.Require(t, "ip")
	n := netnstest.New(t, "br")
	option := func(name string) string {
		out := n.MustRun(t, "ip", "-d", "link", "show", name)
		i := strings.Index(out, "no_linklocal_learn ")
		if i < 0 {
			t.Fatalf("ip -d link show %s says nothing of no_linklocal_learn:\n%s", name, out)
		}
		return out[i : i+len("no_linklocal_learn 0")]
	}
	ensure := func(name string) {
		t.Helper()
		if err := n.Do(func() error {
			_, err := Ensure(name, netip.MustParsePrefix("10.244.1.1/24"), 1500, "02:76:00:00:00:01")
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	ensure("vmlane0")
	if got := option("vmlane0"); got != "no_linklocal_learn 1" {
		t.Errorf("a bridge Ensure made: %s, want no_linklocal_learn 1", got)
	}
	// A bridge made by someone else is adopted with the option on.
	n.MustRun(t, "ip", "link", "add", "adopted0", "type", "bridge")
	ensure("adopted0")
	if got := option("adopted0"); got != "no_linklocal_learn 1" {
		t.Errorf("an adopted bridge: %s, want no_linklocal_learn 1", got)
	}

	n.MustRun(t, "ip", "link", "set", "vmlane0", "type", "bridge", "no_linklocal_learn", "0")
	for i, want := range []bool{true, false} {
		var changed bool
		if err := n.Do(func() (err error) {
			changed, err = EnsureNoLinkLocalLearn("vmlane0")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if changed != want {
			t.Errorf("EnsureNoLinkLocalLearn #%d: changed = %v, want %v", i+1, changed, want)
		}
	}
	if got := option("vmlane0"); got != "no_linklocal_learn 1" {
		t.Errorf("after the repair: %s", got)
	}
	n.MustRun(t, "ip", "link", "add", "notbr", "type", "veth", "peer", "name", "notbr1")
	if err := n.Do(func() error { _, err := EnsureNoLinkLocalLearn("notbr"); return err }); err == nil || !strings.Contains(err.Error(), "not a bridge") {
		t.Errorf("EnsureNoLinkLocalLearn of a veth = %v, want not a bridge", err)
	}
}

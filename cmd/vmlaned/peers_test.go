package main

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmlane/vmlane/internal/peer"
	"github.com/vmlane/vmlane/routes"
)

// TestPeerMovesOverlay: a move known ahead of its claim shows in the
// claims while the claim is at the move's version and the move has not run
// out; a move shown once goes when the claim changes, one never shown
// waits for a watch that is behind; each change of what is shown marks
// the claim to be checked again, and the claims given are never changed.
func TestPeerMovesOverlay(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 21, 0, 0, 0, time.UTC)
	web := claim{VM: "default/web", ResourceVersion: "10", Status: claimStatus{IPv4: "10.244.1.5/24", MAC: "02:76:0a:f4:01:05", Node: "node-a", Pod: "default/web-a", Home: "node-a"}}
	db := claim{VM: "default/db", ResourceVersion: "20", Status: claimStatus{IPv4: "10.244.1.6/24", MAC: "02:76:0a:f4:01:06", Node: "node-a", Home: "node-a", HeldUntil: "2026-11-29T21:00:00Z"}}
	have := []claim{db, web}
	var m peerMoves
	var stale, lapsed []string
	overlay := func(have []claim, now time.Time) []string {
		t.Helper()
		stale, lapsed = nil, nil
		before := slices.Clone(have)
		out := m.overlay(have, now, func(vm string) { stale = append(stale, vm) }, func(vm string, mv peerMove) { lapsed = append(lapsed, vm+"@"+mv.Node) })
		if !slices.Equal(have, before) {
			t.Fatalf("overlay changed the claims it was given")
		}
		slices.Sort(stale)
		var got []string
		for _, c := range out {
			s := c.VM + "@" + c.Status.Node + "/" + c.Status.Pod
			if c.Status.HeldUntil != "" {
				s += " held"
			}
			got = append(got, s)
		}
		return got
	}
	want := func(got []string, w ...string) {
		t.Helper()
		if !slices.Equal(got, w) {
			t.Errorf("claims %v, want %v", got, w)
		}
	}
	wantStale := func(w ...string) {
		t.Helper()
		if !slices.Equal(stale, w) {
			t.Errorf("stale %v, want %v", stale, w)
		}
		if len(lapsed) > 0 {
			t.Errorf("lapsed %v", lapsed)
		}
	}

	want(overlay(have, t0), "default/db@node-a/ held", "default/web@node-a/default/web-a")
	wantStale()
	if m.pending() {
		t.Error("pending with no moves")
	}

	// web migrates to node-b; db, held, starts on node-c.
	m.add("default/web", peerMove{Node: "node-b", Pod: "default/web-b", RV: "10", Until: t0.Add(peerHold)})
	m.add("default/db", peerMove{Node: "node-c", Pod: "default/db-c", RV: "20", Until: t0.Add(peerHold)})
	want(overlay(have, t0), "default/db@node-c/default/db-c", "default/web@node-b/default/web-b")
	wantStale("default/db", "default/web")
	want(overlay(have, t0.Add(time.Second)), "default/db@node-c/default/db-c", "default/web@node-b/default/web-b")
	wantStale() // nothing changed since
	if !m.pending() {
		t.Error("not pending with moves")
	}

	// web's update comes: the claim decides again, and says the same.
	web2 := web
	web2.ResourceVersion, web2.Status.Node, web2.Status.Pod = "11", "node-b", "default/web-b"
	have = []claim{db, web2}
	want(overlay(have, t0.Add(time.Second)), "default/db@node-c/default/db-c", "default/web@node-b/default/web-b")
	wantStale("default/web")
	// A notice of web at its old version again (replayed, or late): the
	// claim has moved past it.
	m.add("default/web", peerMove{Node: "node-c", Pod: "default/web-c", RV: "10", Until: t0.Add(peerHold)})
	want(overlay(have, t0.Add(time.Second)), "default/db@node-c/default/db-c", "default/web@node-b/default/web-b")
	wantStale()

	// Notices of db's version again, the same or naming another pod,
	// do not hold it longer: its hold counts from the first.
	if m.add("default/db", peerMove{Node: "node-c", Pod: "default/db-c", RV: "20", Until: t0.Add(2 * peerHold)}) {
		t.Error("the same notice again is news")
	}
	if !m.add("default/db", peerMove{Node: "node-c", Pod: "default/db-c2", RV: "20", Until: t0.Add(2 * peerHold)}) {
		t.Error("a notice naming another pod is not news")
	}
	want(overlay(have, t0.Add(time.Second)), "default/db@node-c/default/db-c2", "default/web@node-b/default/web-b")
	wantStale("default/db")

	// db's move runs out before its update came: db is as its claim
	// says, the move is said to have lapsed, and no notice of that
	// version is taken again.
	want(overlay(have, t0.Add(peerHold)), "default/db@node-a/ held", "default/web@node-b/default/web-b")
	if !slices.Equal(lapsed, []string{"default/db@node-c"}) {
		t.Errorf("lapsed %v, want db's move to node-c", lapsed)
	}
	lapsed = nil
	wantStale("default/db")
	if m.add("default/db", peerMove{Node: "node-c", Pod: "default/db-c", RV: "20", Until: t0.Add(3 * peerHold)}) {
		t.Error("took a notice of a version whose move lapsed")
	}
	want(overlay(have, t0.Add(peerHold)), "default/db@node-a/ held", "default/web@node-b/default/web-b")
	wantStale()
	if m.pending() {
		t.Errorf("pending after every move went: %v", m.moves)
	}
	// db's claim changes: the lapsed move is forgotten, and a notice of
	// the new version is taken.
	db2 := db
	db2.ResourceVersion = "21"
	have = []claim{db2, web2}
	overlay(have, t0.Add(peerHold))
	if _, ok := m.moves["default/db"]; ok {
		t.Errorf("the lapsed move stays after its claim changed: %v", m.moves)
	}
	have = []claim{db, web2}

	// A notice ahead of this node's watch: it waits for the claim's
	// version, and shows once the watch has it.
	m.add("default/web", peerMove{Node: "node-a", Pod: "default/web-a2", RV: "12", Until: t0.Add(2 * peerHold)})
	want(overlay(have, t0.Add(peerHold)), "default/db@node-a/ held", "default/web@node-b/default/web-b")
	wantStale()
	web3 := web2
	web3.ResourceVersion = "12"
	have = []claim{db, web3}
	want(overlay(have, t0.Add(peerHold)), "default/db@node-a/ held", "default/web@node-a/default/web-a2")
	wantStale("default/web")
	// A move to where the claim says the VM is shows nothing.
	var same peerMoves
	same.add("default/web", peerMove{Node: "node-b", Pod: "default/web-b", RV: "12", Until: t0.Add(peerHold)})
	if got := same.overlay(have, t0, func(vm string) { t.Errorf("stale %s", vm) }, nil); &got[0] != &have[0] {
		t.Error("overlay copied the claims for a move that changes nothing")
	}
}

func TestNoticeFrom(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 21, 0, 0, 0, time.UTC)
	nodes := map[string]routes.Node{
		"node-a": {Name: "node-a", Ready: true, Addrs: []netip.Addr{netip.MustParseAddr("192.168.1.10")}},
		"node-b": {Name: "node-b", Ready: true, Addrs: []netip.Addr{netip.MustParseAddr("192.168.1.11"), netip.MustParseAddr("fd00::11")}},
		"node-c": {Name: "node-c", Ready: false, Addrs: []netip.Addr{netip.MustParseAddr("192.168.1.12")}},
	}
	node := func(n string) (routes.Node, bool) { x, ok := nodes[n]; return x, ok }
	notice := func(from string, sent time.Time) peer.Notice {
		return peer.Notice{From: from, VM: "default/web", Pod: "default/web-b", ResourceVersion: "10", Sent: sent.UnixMilli()}
	}
	b4, b6 := netip.MustParseAddr("192.168.1.11"), netip.MustParseAddr("fd00::11")
	for _, c := range []struct {
		name string
		n    peer.Notice
		src  netip.Addr
		want string
	}{
		{"from node-b", notice("node-b", t0), b4, ""},
		{"over IPv6", notice("node-b", t0.Add(-peerSkew)), b6, ""},
		{"IPv4 in IPv6", notice("node-b", t0.Add(peerSkew)), netip.AddrFrom16(b4.As16()), ""},
		{"this node's name", notice("node-a", t0), b4, "this node's own name"},
		{"no such node", notice("node-x", t0), b4, "not in the cluster"},
		{"not Ready", notice("node-c", t0), netip.MustParseAddr("192.168.1.12"), "not Ready"},
		{"another node's address", notice("node-b", t0), netip.MustParseAddr("192.168.1.12"), "not an address of that Node"},
		{"old", notice("node-b", t0.Add(-peerSkew-time.Millisecond)), b4, "sent 5.001s ago"},
		{"from the future", notice("node-b", t0.Add(peerSkew+time.Millisecond)), b4, "sent 5.001s ahead"},
	} {
		err := noticeFrom(c.n, c.src, "node-a", node, t0)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: err %v, want one saying %q", c.name, err, c.want)
		}
	}
}

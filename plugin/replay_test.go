package plugin

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vmlane/vmlane/leases"
)

// FuzzPluginReplay runs shuffled ADD/DEL sequences over 20 attachments,
// plain and VM ones in separate pods, retries included, and checks the
// invariants at the end: each live attachment holds exactly one lease,
// addresses are distinct, each has its veth (and TAP), and nothing else is
// left. The seed picks the sequence: `go test` replays the corpus
// (testdata/fuzz/FuzzPluginReplay), `make fuzz` tries new seeds, and a
// failing seed is saved there as a reproducer.
func FuzzPluginReplay(f *testing.F) {
	for _, seed := range []uint64{1, 2, 0x9e3779b97f4a7c15} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) { replay(t, seed) })
}

func replay(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	h := newHarness(t, nil)
	// The lease file's fsyncs were most of a replay's time on disk, and
	// the fuzz engine runs one replay per input (its whole cached corpus
	// first, within make fuzz's 10 s); durability is no part of what a
	// replay checks, so its lease file is on tmpfs where there is one.
	if dir, err := os.MkdirTemp("/dev/shm", "vmlane-replay-"); err == nil {
		t.Cleanup(func() { os.RemoveAll(dir) })
		h.leaseFile = filepath.Join(dir, "leases.json")
		h.set["leaseFile"] = h.leaseFile
	}
	// An op is ADD, DEL, or the pod's netns going away before its DEL.
	type op struct {
		verb string
		i    int
	}
	const n = 20
	var ops []op
	for i := range n {
		for range 1 + rng.IntN(4) {
			ops = append(ops, op{verb: []string{"ADD", "ADD", "DEL", "GONE+DEL"}[rng.IntN(4)], i: i})
		}
	}
	rng.Shuffle(len(ops), func(x, y int) { ops[x], ops[y] = ops[y], ops[x] })

	atts := make([]attachment, n)
	vm := make([]bool, n)
	for i := range n {
		atts[i] = att(fmt.Sprintf("pod%02d", i))
		if i%3 == 1 {
			atts[i].ifname = "net1" // not every attachment is eth0
		}
		vm[i] = i%2 == 1
	}
	live := make(map[int]netip.Addr)
	for step, o := range ops {
		a, extra := atts[o.i], map[string]any{"vm": vm[o.i]}
		if o.verb == "GONE+DEL" {
			h.dp.removeNetns(a.netns)
		}
		if o.verb == "ADD" {
			out, err := h.add(a, extra)
			if err != nil {
				t.Fatalf("step %d: ADD %s: %v", step, a.id, err)
			}
			r := parseResult(t, out)
			ip, _ := netip.AddrFromSlice(r.IPs[0].Address.IP.To4())
			if prev, ok := live[o.i]; ok && prev != ip {
				t.Fatalf("step %d: retried ADD %s gave %s, earlier %s", step, a.id, ip, prev)
			}
			live[o.i] = ip
		} else {
			if err := h.del(a, extra); err != nil {
				t.Fatalf("step %d: DEL %s: %v", step, a.id, err)
			}
			delete(live, o.i)
		}
	}

	// Invariants.
	snap, err := leases.Read(h.leaseFile)
	if err != nil {
		t.Fatal(err)
	}
	held := make(map[leases.Key][]netip.Addr)
	byIP := make(map[netip.Addr]bool)
	for _, l := range snap.Leases() {
		held[l.Key()] = append(held[l.Key()], l.IP)
		if byIP[l.IP] {
			t.Errorf("%s leased twice", l.IP)
		}
		byIP[l.IP] = true
	}
	wantHost := []string{"vmlane0"}
	for i, a := range atts {
		ip, ok := live[i]
		switch {
		case !ok && len(held[a.key()]) > 0:
			t.Errorf("%s is gone but holds %v", a.key(), held[a.key()])
		case ok && !slices.Equal(held[a.key()], []netip.Addr{ip}):
			t.Errorf("%s holds %v, want exactly [%s]", a.key(), held[a.key()], ip)
		}
		var wantPod []string
		if ok {
			wantHost = append(wantHost, a.veth())
			wantPod = append(wantPod, a.ifname)
			if vm[i] {
				wantPod = append(wantPod, "tap"+a.ifname[3:])
			}
		}
		slices.Sort(wantPod)
		if got := h.dp.linkNames(a.netns); !slices.Equal(got, wantPod) {
			t.Errorf("links in %s: %q, want %q", a.netns, got, wantPod)
		}
	}
	slices.Sort(wantHost)
	if diff := cmp.Diff(wantHost, h.dp.linkNames("")); diff != "" {
		t.Errorf("host links (-want +got):\n%s", diff)
	}
	if len(snap.Leases()) != len(live) {
		t.Errorf("%d leases, %d live attachments", len(snap.Leases()), len(live))
	}
	if t.Failed() {
		t.Logf("seed %d; ops %v", seed, ops)
	}
}

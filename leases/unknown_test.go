package leases

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"
)

// newerFile is a lease file as a newer vmlane writes it: members this
// version does not know at the file level, in a lease and in its pod.
const newerFile = `{"version":1,"node":"node-a","subnet":"10.0.0.0/24","gateway":"10.0.0.1","lastReserved":"10.0.0.5","leases":[
  {"mac":"02:00:0a:00:00:05","ip":"10.0.0.5","state":"bound","source":"cni","containerID":"c5","ifname":"eth0","pod":{"namespace":"vms","name":"vm-a","uid":"u5","tier":{"level":"gold"}},"created":"2026-11-22T17:00:00Z","expires":"2026-11-23T17:00:00Z","vlan":7,"trunk":[1,2]}
],"policy":{"quarantine":"1h"}}
`

// TestUnknownMembersSurviveARewrite: a Reserve and a Release by this
// version leave a newer writer's members where they were, byte for byte,
// and the lease it creates has none.
func TestUnknownMembersSurviveARewrite(t *testing.T) {
	s, _ := newStore(t, "10.0.0.0/24")
	if err := os.WriteFile(s.Path(), []byte(newerFile), 0o644); err != nil {
		t.Fatal(err)
	}
	l := mustReserve(t, s, cniReq("c6"))
	if !l.Unknown.IsZero() || !l.Pod.Unknown.IsZero() {
		t.Errorf("a new lease has unknown members %q, pod %q", l.Unknown, l.Pod.Unknown)
	}
	data, err := os.ReadFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(newerFile, "\n")
	for _, want := range []string{lines[1] + ",", lines[3]} {
		if !strings.Contains(string(data), want) {
			t.Errorf("after a Reserve the file lacks\n%s\nit is:\n%s", want, data)
		}
	}
	if _, ok, err := s.Release(l.Key()); err != nil || !ok {
		t.Fatalf("Release: %v %v", ok, err)
	}
	data, err = os.ReadFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	// Only the allocator's cursor moved.
	want := strings.Replace(newerFile, `"lastReserved":"10.0.0.5"`, `"lastReserved":"10.0.0.6"`, 1)
	if string(data) != want {
		t.Errorf("after a Reserve and a Release:\n%s\nwant:\n%s", data, want)
	}

	// A change to the lease itself keeps its members too.
	bound, err := s.Bind("02:00:0a:00:00:05", netip.MustParseAddr("10.0.0.5"), t0.Add(48*time.Hour), "")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := bound.Unknown.String(), `"vlan":7,"trunk":[1,2]`; got != want {
		t.Errorf("bound lease's unknown members = %q, want %q", got, want)
	}
	if got, want := bound.Pod.Unknown.String(), `"tier":{"level":"gold"}`; got != want {
		t.Errorf("bound lease's pod's unknown members = %q, want %q", got, want)
	}
}

// TestUnknownMembersFollowTheKnownOnes: wherever a writer put them, Encode
// writes unknown members after the known members of their object, in the
// order they were read, each as it was read.
func TestUnknownMembersFollowTheKnownOnes(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{{
		name: "file",
		in:   `{"a" : 1,"version":1,"subnet":"10.0.0.0/24","b":[true, null],"leases":[],"c":{}}`,
		want: `{"version":1,"subnet":"10.0.0.0/24","gateway":"","leases":[],"a" : 1,"b":[true, null],"c":{}}` + "\n",
	}, {
		name: "lease and pod",
		in:   `{"version":1,"subnet":"10.0.0.0/24","leases":[{"x":"1","ip":"10.0.0.2","pod":{"q":2,"name":"p","r":3},"state":"bound","source":"cni","y":{"z":[]}}]}`,
		want: `{"version":1,"subnet":"10.0.0.0/24","gateway":"","leases":[` + "\n" +
			`  {"mac":"","ip":"10.0.0.2","state":"bound","source":"cni","pod":{"name":"p","q":2,"r":3},"x":"1","y":{"z":[]}}` + "\n]}\n",
	}, {
		name: "pod of unknown members only",
		in:   `{"version":1,"subnet":"10.0.0.0/24","leases":[{"ip":"10.0.0.2","state":"bound","source":"cni","pod":{"q":2}}]}`,
		want: `{"version":1,"subnet":"10.0.0.0/24","gateway":"","leases":[` + "\n" +
			`  {"mac":"","ip":"10.0.0.2","state":"bound","source":"cni","pod":{"q":2}}` + "\n]}\n",
	}, {
		name: "repeated key kept twice, escapes kept",
		in:   `{"version":1,"subnet":"10.0.0.0/24","leases":[],"d":1,"\u0064":2}`,
		want: `{"version":1,"subnet":"10.0.0.0/24","gateway":"","leases":[],"d":1,"\u0064":2}` + "\n",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Decode([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			got, err := f.Encode()
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("Encode:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

// TestNewerBinarysFile is issue 12's rolling upgrade: a newer vmlane wrote
// members this version does not know (file, lease, pod) and leases of a
// state ("quarantined") and a source ("kubevirt") it does not know. This
// version reads the file, keeps those leases' addresses and MACs from
// everyone, serves none of them, changes none of them, and its own
// Reserve and Release leave the newer writer's bytes as they were.
func TestNewerBinarysFile(t *testing.T) {
	newer, err := os.ReadFile("testdata/newer-binary.json")
	if err != nil {
		t.Fatal(err)
	}
	s, clk := newStore(t, "10.244.3.0/29") // usable: .2 to .6
	if err := os.WriteFile(s.Path(), newer, 0o644); err != nil {
		t.Fatal(err)
	}
	const quarantinedMAC, kubevirtMAC = "02:00:0a:f4:03:03", "52:54:00:00:00:04"
	quarantined, kubevirt := netip.MustParseAddr("10.244.3.3"), netip.MustParseAddr("10.244.3.4")
	unchanged := func(when string) {
		t.Helper()
		data, err := os.ReadFile(s.Path())
		if err != nil {
			t.Fatal(err)
		}
		if string(data) != string(newer) {
			t.Fatalf("%s the file is\n%s\nwant the newer binary's, byte for byte:\n%s", when, data, newer)
		}
	}

	// Readers list the unknown leases and say who holds their address;
	// no lookup that serves an address returns them.
	snap, err := Read(s.Path())
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	var states []string
	for _, l := range snap.Leases() {
		states = append(states, fmt.Sprintf("%s %s/%s known=%v", l.IP, l.State, l.Source, l.Known()))
	}
	if got, want := strings.Join(states, "; "), "10.244.3.2 bound/cni known=true; 10.244.3.3 quarantined/cni known=false; 10.244.3.4 bound/kubevirt known=false"; got != want {
		t.Errorf("leases: %s\nwant %s", got, want)
	}
	snap = snap.At(t0.Add(-40 * time.Minute)) // before their expiries
	for _, mac := range []string{quarantinedMAC, kubevirtMAC} {
		if l, ok := snap.ByMAC(mac); ok {
			t.Errorf("Snapshot.ByMAC(%s) serves %s %s/%s", mac, l.IP, l.State, l.Source)
		}
	}
	if l, ok := snap.ByIP(quarantined); !ok || l.Known() {
		t.Errorf("Snapshot.ByIP(%s) = %+v, %v: want the unknown lease that holds it", quarantined, l, ok)
	}
	if c := snap.Compat(); len(c) != 1 || c[0].IP != "10.244.3.2" {
		t.Errorf("Compat exports %+v, want only 10.244.3.2", c)
	}

	// Allocation hands out every other address and never theirs.
	var got []string
	for i := 0; ; i++ {
		l, err := s.Reserve(cniReq(fmt.Sprint("new-", i)))
		if errors.Is(err, ErrExhausted) {
			break
		}
		if err != nil {
			t.Fatalf("Reserve %d: %v", i, err)
		}
		got = append(got, l.IP.String())
	}
	if want := "10.244.3.5 10.244.3.6"; strings.Join(got, " ") != want {
		t.Errorf("allocated %v, want %s", got, want)
	}
	for i := range got {
		if _, ok, err := s.Release(Key{fmt.Sprint("new-", i), "eth0"}); err != nil || !ok {
			t.Fatalf("Release: %v, %v", ok, err)
		}
	}
	// The cursor ends where the newer binary left it.
	unchanged("after this binary's Reserve and Release,")

	// No change touches them, and nothing is written.
	// (With free addresses again, a request fails on theirs or on their
	// MACs alone.)
	for _, req := range []ReserveRequest{
		{Key: Key{"x", "eth0"}, IP: quarantined},
		{Key: Key{"x", "eth0"}, IP: kubevirt},
		{Key: Key{"x", "eth0"}, MAC: quarantinedMAC},
		{MAC: kubevirtMAC},
	} {
		if l, err := s.Reserve(req); !errors.Is(err, ErrInUse) {
			t.Errorf("Reserve(ip %v, mac %q) = %s, %v: want ErrInUse", req.IP, req.MAC, l.IP, err)
		}
	}
	if _, err := s.Reserve(cniReq("c-q")); !errors.Is(err, ErrConflict) {
		t.Errorf("Reserve for the quarantined lease's attachment: %v, want ErrConflict", err)
	}
	if l, ok, err := s.Get(Key{"c-q", "eth0"}); err != nil || ok {
		t.Errorf("Get of the quarantined lease's attachment = %+v, %v, %v: want none", l, ok, err)
	}
	if _, ok, err := s.Release(Key{"c-q", "eth0"}); err != nil || ok {
		t.Errorf("Release of the quarantined lease's attachment: %v, %v: want nothing released", ok, err)
	}
	for mac, ip := range map[string]netip.Addr{quarantinedMAC: quarantined, kubevirtMAC: kubevirt} {
		if _, err := s.Bind(mac, ip, t0.Add(time.Hour), ""); !errors.Is(err, ErrConflict) {
			t.Errorf("Bind(%s, %s): %v, want ErrConflict", mac, ip, err)
		}
		if _, err := s.Decline(ip, mac, t0.Add(time.Hour)); !errors.Is(err, ErrConflict) {
			t.Errorf("Decline(%s, %s): %v, want ErrConflict", ip, mac, err)
		}
		if err := s.Update(func(tx *Tx) error {
			if l, ok := tx.ByMAC(mac); ok {
				t.Errorf("Tx.ByMAC(%s) serves %s", mac, l.IP)
			}
			if l, ok := tx.ReleaseMAC(mac); ok {
				t.Errorf("ReleaseMAC(%s) released %s", mac, l.IP)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	unchanged("after changes refused,")

	// Past every expiry, and with no attachment valid, this binary's
	// Expire and GC remove the lease it knows and keep the others.
	clk.advance(72 * time.Hour)
	if _, err := s.Expire(); err != nil {
		t.Fatal(err)
	}
	if released, err := s.GC(nil); err != nil || len(released) != 1 || released[0].IP.String() != "10.244.3.2" {
		t.Errorf("GC released %v (%v), want only 10.244.3.2", ips(released), err)
	}
	data, err := os.ReadFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(newer), "\n")
	want := strings.Join([]string{lines[0], lines[2], lines[3], lines[4], ""}, "\n")
	if string(data) != want {
		t.Errorf("after Expire and GC the file is\n%s\nwant\n%s", data, want)
	}
}

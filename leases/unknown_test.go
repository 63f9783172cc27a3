package leases

import (
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

package vmnet_test

import (
	"errors"
	"io/fs"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/vmlane/vmlane/pf/vmnet"
)

// TestHandle is the broker protocol's requests and replies, as
// nirs/vmnet-broker's docs/protocol.md gives them, with vmlane-vmnet's
// client check first.
func TestHandle(t *testing.T) {
	root := Peer{PID: 10, UID: 0, GID: 0}
	member := Peer{PID: 11, UID: 501, GID: 20, Groups: []uint32{12, 701}}
	primary := Peer{PID: 12, UID: 502, GID: 701}
	stranger := Peer{PID: 13, UID: 503, GID: 20, Groups: []uint32{12}}
	group := Policy{Group: 701, HasGroup: true}
	acquire := Request{Command: "acquire", NetworkName: "pod"}
	for _, tc := range []struct {
		name   string
		req    Request
		peer   Peer
		pol    Policy
		served bool
		want   ErrorCode
	}{
		{"root acquires", acquire, root, Policy{}, true, 0},
		{"a member of the group acquires", acquire, member, group, true, 0},
		{"the group as primary group", acquire, primary, group, true, 0},
		{"not in the group", acquire, stranger, group, true, NotAllowed},
		{"no group configured: root only", acquire, member, Policy{}, true, NotAllowed},
		{"not allowed comes before a bad request", Request{}, stranger, group, true, NotAllowed},
		{"no command", Request{NetworkName: "pod"}, root, group, true, InvalidRequest},
		{"unknown command", Request{Command: "release", NetworkName: "pod"}, root, group, true, InvalidRequest},
		{"no network name", Request{Command: "acquire"}, root, group, true, InvalidRequest},
		{"another network", Request{Command: "acquire", NetworkName: "shared"}, root, group, true, NotFound},
		{"not held now", acquire, member, group, false, CreateFailure},
	} {
		got := Handle(tc.req, tc.peer, tc.pol, "pod", tc.served)
		if got.Error != tc.want || got.Network() != (tc.want == 0) {
			t.Errorf("%s: Handle = %+v (network %v), want error %v", tc.name, got, got.Network(), tc.want)
		}
	}
}

func TestBrokerError(t *testing.T) {
	for code, want := range map[ErrorCode]string{
		NotAllowed: `acquiring vmnet network "pod": NOT_ALLOWED: this user is neither root nor in vmlane-vmnet's --group`,
		NotFound:   `acquiring vmnet network "pod": NOT_FOUND: no network of that name`,
		99:         `acquiring vmnet network "pod": error 99`,
	} {
		if got := (&BrokerError{Code: code, Network: "pod"}).Error(); !strings.HasPrefix(got, want) {
			t.Errorf("%d: %q, want it to start %q", code, got, want)
		}
	}
}

func TestStateRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db", "vmlane", "state.json") // the folder is made
	st := State{PID: 7, Updated: time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC), Service: ServiceName, Network: "pod",
		Phase: PhaseServing, Want: netip.MustParsePrefix("10.244.5.0/24"), Subnet: netip.MustParsePrefix("10.244.5.0/24"), Clients: 2}
	if err := WriteState(path, st); err != nil {
		t.Fatal(err)
	}
	got, err := ReadState(path)
	st.Version = 1
	if err != nil || got.Subnet != st.Subnet || got.Clients != 2 || got.Phase != PhaseServing || !got.Updated.Equal(st.Updated) {
		t.Errorf("ReadState = %+v, %v", got, err)
	}
	if _, err := ReadState(filepath.Join(t.TempDir(), "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
}

func TestCheckState(t *testing.T) {
	pod := netip.MustParsePrefix("10.244.5.0/24")
	now := time.Date(2026, 11, 28, 8, 0, 30, 0, time.UTC)
	fresh := now.Add(-5 * time.Second)
	serving := State{Version: 1, Updated: fresh, Network: "pod", Phase: PhaseServing, Want: pod, Subnet: pod, Bridge: "bridge101", Clients: 1}
	for _, tc := range []struct {
		name string
		st   State
		err  error
		want Verdict
		msg  string
	}{
		{"serving", serving, nil, Served, "bridge101; 1 clients"},
		{"never ran", State{}, fs.ErrNotExist, NotServed, "never reported"},
		{"unreadable", State{}, errors.New("bad json"), NotServed, "unreadable"},
		{"stopped", func() State { s := serving; s.Updated = now.Add(-time.Minute); return s }(), nil, NotServed, "not reported since"},
		{"waiting", State{Version: 1, Updated: fresh, Phase: PhaseWaiting, Message: "no description"}, nil, NotServed, "waiting"},
		{"refused", State{Version: 1, Updated: fresh, Phase: PhaseRefused, Want: pod, Message: "overlaps utun4"}, nil, NotServed, "refused the pod network on 10.244.5.0/24: overlaps utun4"},
		{"made elsewhere", State{Version: 1, Updated: fresh, Phase: PhaseRefused, Want: pod, Subnet: netip.MustParsePrefix("192.168.64.0/24")}, nil, WrongSubnet, "on 192.168.64.0/24, not on podCIDR"},
		{"old podCIDR still held", func() State { s := serving; s.Subnet = netip.MustParsePrefix("10.244.9.0/24"); return s }(), nil, WrongSubnet, "1 clients still hold it"},
	} {
		v, msg := CheckState(tc.st, tc.err, pod, now)
		if v != tc.want || !strings.Contains(msg, tc.msg) {
			t.Errorf("%s: CheckState = %v, %q; want %v and %q", tc.name, v, msg, tc.want, tc.msg)
		}
	}
}

package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmlane/vmlane/internal/testing/vmnetfake"
	"github.com/vmlane/vmlane/pf"
	"github.com/vmlane/vmlane/pf/vmnet"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func testDaemon(t *testing.T) (*daemon, *vmnetfake.API, *clock) {
	t.Helper()
	dir := t.TempDir()
	f := vmnetfake.New()
	d := newDaemon(f, slog.New(slog.NewTextHandler(io.Discard, nil)))
	c := &clock{t: time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC)}
	d.descPath, d.statePath, d.now, d.pid = filepath.Join(dir, "vmnet-network.json"), filepath.Join(dir, "state.json"), c.now, 42
	d.policy = vmnet.Policy{Group: 701, HasGroup: true}
	return d, f, c
}

func writeDesc(t *testing.T, d *daemon, subnet string) {
	t.Helper()
	n, _, err := pf.NewNetwork(netip.MustParsePrefix(subnet), 1500, nil, []pf.Reservation{{MAC: "02:00:0a:f4:05:07", IP: netip.MustParseAddr(strings.TrimSuffix(subnet, "0/24") + "7")}})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(n)
	if err := os.WriteFile(d.descPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func state(t *testing.T, d *daemon) vmnet.State {
	t.Helper()
	st, err := vmnet.ReadState(d.statePath)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

var (
	member   = vmnet.Peer{PID: 100, UID: 501, GID: 20, Groups: []uint32{701}}
	stranger = vmnet.Peer{PID: 101, UID: 502, GID: 20}
	acquire  = vmnet.Request{Command: vmnet.CommandAcquire, NetworkName: vmnet.DefaultNetworkName}
)

// TestDaemonLifecycle walks vmlane-vmnet through a node's life: no
// podCIDR yet, the network made and served, a client holding it, the
// podCIDR changing under the client (the old network stays until it lets
// go), and the stop.
func TestDaemonLifecycle(t *testing.T) {
	d, f, c := testDaemon(t)
	d.ifaces = func() []pf.Iface {
		return []pf.Iface{{Name: "bridge101", Addrs: []netip.Prefix{netip.MustParsePrefix("10.244.5.1/24")}}}
	}

	d.sync()
	if st := state(t, d); st.Phase != vmnet.PhaseWaiting || st.PID != 42 || st.Service != vmnet.ServiceName {
		t.Fatalf("before the description: %+v", st)
	}
	if rep, _ := d.Request(1, member, acquire); rep.Error != vmnet.CreateFailure {
		t.Errorf("acquire before the network is held: %v, want CREATE_FAILURE", rep.Error)
	}

	writeDesc(t, d, "10.244.5.0/24")
	d.sync()
	st := state(t, d)
	if st.Phase != vmnet.PhaseServing || st.Subnet != netip.MustParsePrefix("10.244.5.0/24") || st.Bridge != "bridge101" {
		t.Fatalf("serving: %+v", st)
	}
	if rep, _ := d.Request(2, stranger, acquire); rep.Error != vmnet.NotAllowed {
		t.Errorf("a stranger: %v, want NOT_ALLOWED", rep.Error)
	}
	rep, ser := d.Request(3, member, acquire)
	if !rep.Network() || ser == 0 || ser != d.held.Serialization {
		t.Fatalf("member: %+v %v", rep, ser)
	}
	d.Request(3, member, acquire) // a second acquire on one connection is one hold
	if st := state(t, d); st.Clients != 1 {
		t.Errorf("clients %d, want 1", st.Clients)
	}

	// The podCIDR changes while the client holds the network: nothing
	// is made until it lets go.
	writeDesc(t, d, "10.244.9.0/24")
	calls := len(f.Calls)
	d.sync()
	if len(f.Calls) != calls {
		t.Errorf("vmnet called while a client holds the network: %v", f.Calls[calls:])
	}
	st = state(t, d)
	if st.Subnet != netip.MustParsePrefix("10.244.5.0/24") || !strings.Contains(st.Pending, "10.244.9.0/24") {
		t.Errorf("pending: %+v", st)
	}
	if v, msg := vmnet.CheckState(st, nil, netip.MustParsePrefix("10.244.9.0/24"), c.t); v != vmnet.WrongSubnet {
		t.Errorf("vmlaned's view: %v %s", v, msg)
	}
	d.Disconnected(3)
	st = state(t, d)
	if st.Subnet != netip.MustParsePrefix("10.244.9.0/24") || st.Pending != "" || st.Clients != 0 {
		t.Errorf("after the client let go: %+v", st)
	}
	if held := f.Held(); len(held) != 2 {
		t.Errorf("held %v, want the new network and its serialization", held)
	}

	// Heartbeat: an unchanged state is written again after vmnet.Heartbeat.
	c.t = c.t.Add(vmnet.Heartbeat + time.Second)
	d.sync()
	if st := state(t, d); !st.Updated.Equal(c.t) {
		t.Errorf("heartbeat: updated %s, want %s", st.Updated, c.t)
	}

	d.stop()
	if held := f.Held(); len(held) != 0 {
		t.Errorf("after stop, held %v", held)
	}
	if st := state(t, d); st.Phase != vmnet.PhaseWaiting {
		t.Errorf("after stop: %+v", st)
	}
}

// TestDaemonRefused: vmnet refuses the network (the subnet is in use) or
// makes it elsewhere; the state says so, with the interface in the way,
// and the same description is tried again only after retryRefused.
func TestDaemonRefused(t *testing.T) {
	d, f, c := testDaemon(t)
	d.ifaces = func() []pf.Iface {
		return []pf.Iface{{Name: "utun4", Addrs: []netip.Prefix{netip.MustParsePrefix("10.244.0.2/16")}}}
	}
	f.Fail["vmnet_network_create"] = vmnet.Failure
	writeDesc(t, d, "10.244.5.0/24")
	d.sync()
	st := state(t, d)
	if st.Phase != vmnet.PhaseRefused || !strings.Contains(st.Message, "utun4 10.244.0.2/16") {
		t.Fatalf("refused: %+v", st)
	}
	creates := strings.Count(strings.Join(f.Calls, "\n"), "vmnet_network_create(")
	c.t = c.t.Add(2 * time.Second)
	d.sync()
	if n := strings.Count(strings.Join(f.Calls, "\n"), "vmnet_network_create("); n != creates {
		t.Errorf("tried again after 2 s: %d creates", n)
	}
	delete(f.Fail, "vmnet_network_create")
	f.Subnet = netip.MustParsePrefix("192.168.64.0/24")
	c.t = c.t.Add(retryRefused)
	d.sync()
	st = state(t, d)
	if st.Phase != vmnet.PhaseRefused || st.Subnet != f.Subnet {
		t.Fatalf("made elsewhere: %+v", st)
	}
	if v, _ := vmnet.CheckState(st, nil, netip.MustParsePrefix("10.244.5.0/24"), c.t); v != vmnet.WrongSubnet {
		t.Errorf("vmlaned's view of a network made elsewhere: %v", v)
	}
	if held := f.Held(); len(held) != 0 {
		t.Errorf("a network on the wrong subnet is held: %v", held)
	}
	if rep, _ := d.Request(1, member, acquire); rep.Error != vmnet.CreateFailure {
		t.Errorf("acquire of a refused network: %v", rep.Error)
	}
}

func TestParseAndPolicy(t *testing.T) {
	c, v, err := parse([]string{"--group", "staff", "--disable-nat44"}, io.Discard)
	if err != nil || v || c.Group != "staff" || !c.Options.DisableNAT44 || c.NetworkFile != pf.DefaultNetworkFile || c.Service != "dev.vmlane.vmnet" {
		t.Errorf("parse = %+v %v %v", c, v, err)
	}
	for _, args := range [][]string{{"--sync-period", "0s"}, {"--network-name", ""}, {"extra"}} {
		if _, _, err := parse(args, io.Discard); err == nil {
			t.Errorf("parse(%q) accepted", args)
		}
	}
	lookup := func(name string) (*user.Group, error) {
		if name == "staff" {
			return &user.Group{Gid: "20", Name: "staff"}, nil
		}
		return nil, user.UnknownGroupError(name)
	}
	for _, tc := range []struct {
		group string
		want  vmnet.Policy
		err   string
	}{
		{"", vmnet.Policy{}, ""},
		{"701", vmnet.Policy{Group: 701, HasGroup: true}, ""},
		{"staff", vmnet.Policy{Group: 20, HasGroup: true}, ""},
		{"nosuch", vmnet.Policy{}, "--group nosuch"},
	} {
		got, err := policy(tc.group, lookup)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("policy(%q) = %+v, %v", tc.group, got, err)
		}
	}
}

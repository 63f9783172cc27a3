package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/vmlane/vmlane/internal/ndproxy"
	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/privtest"
	"github.com/vmlane/vmlane/leases"
	"github.com/vmlane/vmlane/plugin"
	"github.com/vmlane/vmlane/routes"
)

// fakeProxies is a bridge's NDP proxy table.
type fakeProxies map[netip.Addr]string

func (f fakeProxies) List(bridge string) ([]netip.Addr, error) {
	var out []netip.Addr
	for a, br := range f {
		if br == bridge {
			out = append(out, a)
		}
	}
	return out, nil
}
func (f fakeProxies) Add(bridge string, a netip.Addr) error { f[a] = bridge; return nil }
func (f fakeProxies) Del(bridge string, a netip.Addr) error { delete(f, a); return nil }

// The home node of VMs running elsewhere keeps their addresses held and an
// NDP proxy entry for each IPv6 one, and drops the entry of a VM that
// came back.
func TestClaimsHoldAndProxyLent(t *testing.T) {
	sub, sub6 := netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:10:244:1::/64")
	store, err := leases.Open(filepath.Join(t.TempDir(), "leases.json"), sub, sub.Addr().Next(), leases.WithSubnet6(sub6, sub6.Addr().Next()))
	if err != nil {
		t.Fatal(err)
	}
	px := fakeProxies{netip.MustParseAddr("fd00:10:244:1::9"): "vmlane0", netip.MustParseAddr("fd00:99::1"): "vmlane0"}
	s := &claimsSync{c: &config{Bridge: "vmlane0", NodeName: "node-a"}, store: store, proxies: px, warned: map[string]string{}}
	lent := []plugin.NodeClaim{{
		VM: "default/web", IPv4: netip.MustParsePrefix("10.244.1.5/24"), IPv6: netip.MustParsePrefix("fd00:10:244:1::5/64"),
		MAC: "02:76:0a:f4:01:05", Node: "node-b",
	}}
	s.holdLent(lent)
	s.proxyLent(lent)
	ls, _ := store.List()
	if len(ls) != 1 || ls[0].State != leases.StateHeld || ls[0].VMName != "default/web" || ls[0].IP6 != lent[0].IPv6.Addr() {
		t.Errorf("leases %+v, want the VM's addresses held", ls)
	}
	got, _ := px.List("vmlane0")
	slices.SortFunc(got, netip.Addr.Compare)
	want := []netip.Addr{netip.MustParseAddr("fd00:10:244:1::5"), netip.MustParseAddr("fd00:99::1")}
	if !slices.Equal(got, want) {
		t.Errorf("proxy entries %v, want %v (the VM's, and the one not of subnet6 left alone)", got, want)
	}
	s.proxyLent(nil)
	if got, _ := px.List("vmlane0"); !slices.Equal(got, want[1:]) {
		t.Errorf("proxy entries after the VM came back: %v, want %v", got, want[1:])
	}
}

// TestBridgeFrames: the kernel's forwarding database says when a bridge
// last heard a MAC on a port (netlinkFrames), and its notice of a MAC new to
// the bridge wakes watchFrames when the MAC is awaited: how a live
// migration's target hears the guest. The frame is an ARP request sent from
// a veth on the bridge, as a migrated guest's gratuitous ARP comes in.
func TestBridgeFrames(t *testing.T) {
	privtest.Require(t, "ip")
	node := netnstest.New(t, "node")
	node.MustRun(t, "ip", "link", "add", "br-f", "type", "bridge")
	node.MustRun(t, "ip", "link", "add", "vf-host", "type", "veth", "peer", "name", "vf-guest")
	node.MustRun(t, "ip", "link", "set", "vf-guest", "address", "02:76:0a:f4:01:05")
	node.MustRun(t, "ip", "link", "set", "vf-host", "master", "br-f", "up")
	node.MustRun(t, "ip", "link", "set", "br-f", "up")
	node.MustRun(t, "ip", "link", "set", "vf-guest", "up")

	var awaited awaitedMACs
	awaited.set(map[string]string{"default/web": "02:76:0a:f4:01:05"})
	woke := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{})
	go func() {
		// The subscription is made in the node's namespace: a
		// netlink socket stays in the namespace it was opened in.
		_ = node.Do(func() error {
			close(ready)
			watchFrames(ctx, &awaited, func() {
				select {
				case woke <- struct{}{}:
				default:
				}
			}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			return nil
		})
	}()
	<-ready
	time.Sleep(200 * time.Millisecond) // the subscription is made after ready

	before := time.Now()
	// An ARP request from the guest's side: arping is not in every
	// image, an address on vf-guest and a ping to a neighbour is.
	node.MustRun(t, "ip", "addr", "add", "192.0.2.5/24", "dev", "vf-guest")
	_, _ = node.Run("ping", "-c", "1", "-W", "1", "192.0.2.9")
	select {
	case <-woke:
	case <-time.After(5 * time.Second):
		t.Error("watchFrames did not wake for the awaited MAC")
	}
	var last map[frameKey]time.Time
	err := node.Do(func() (err error) {
		last, err = netlinkFrames{}.LastFrames("br-f")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	got, ok := last[frameKey{Port: "vf-host", MAC: "02:76:0a:f4:01:05"}]
	if !ok {
		t.Fatalf("LastFrames %v: no entry for the guest's MAC on its port", last)
	}
	// The kernel's clock ticks are 10 ms, and the "ago" it gives is
	// rounded down: allow a tick either side.
	if got.Before(before.Add(-20*time.Millisecond)) || got.After(time.Now().Add(20*time.Millisecond)) {
		t.Errorf("last frame at %v, want after %v (the ping)", got, before)
	}
	// The port's own MAC is a permanent (local) entry of the bridge's:
	// not a frame heard.
	own := strings.TrimSpace(node.MustRun(t, "cat", "/sys/class/net/vf-host/address"))
	if _, ok := last[frameKey{Port: "vf-host", MAC: own}]; ok || len(last) != 1 {
		t.Errorf("LastFrames %v: want the guest's MAC only, not the port's own %s", last, own)
	}

	// The same MAC from another port (an unchecked one) is another
	// entry: framesOnPorts takes the migration target's port only.
	node.MustRun(t, "ip", "link", "add", "vf2-host", "type", "veth", "peer", "name", "vf2-guest")
	node.MustRun(t, "ip", "link", "set", "vf2-host", "master", "br-f", "up")
	node.MustRun(t, "ip", "link", "set", "vf-guest", "down")
	node.MustRun(t, "ip", "link", "set", "vf2-guest", "address", "02:76:0a:f4:01:05", "up")
	node.MustRun(t, "ip", "addr", "add", "192.0.2.6/24", "dev", "vf2-guest")
	_, _ = node.Run("ping", "-c", "1", "-W", "1", "-I", "vf2-guest", "192.0.2.9")
	err = node.Do(func() (err error) {
		last, err = netlinkFrames{}.LastFrames("br-f")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := last[frameKey{Port: "vf2-host", MAC: "02:76:0a:f4:01:05"}]; !ok {
		t.Fatalf("LastFrames %v: no entry for the MAC on the second port", last)
	}
	mig := map[string]string{"default/web": "02:76:0a:f4:01:05"}
	if on := framesOnPorts(last, mig, map[string]string{"default/web": "vf-host"}); !on["02:76:0a:f4:01:05"].Equal(last[frameKey{Port: "vf-host", MAC: "02:76:0a:f4:01:05"}]) {
		t.Errorf("framesOnPorts for the target's port vf-host = %v, want its own entry", on)
	}
}

// TestSlimClaim: the informer keeps a VMClaim's identity and status only,
// and a claim reads from it as from the whole object; a status member of
// the wrong type reads as empty (checkClaim refuses it).
func TestSlimClaim(t *testing.T) {
	full := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "vmlane.io/v1alpha1", "kind": "VMClaim",
		"metadata": map[string]any{"name": "web", "namespace": "prod", "resourceVersion": "42", "labels": map[string]any{"a": "b"}, "creationTimestamp": "2026-11-27T10:00:00Z",
			"managedFields": []any{map[string]any{"manager": "vmlaned"}}},
		"status": map[string]any{"ipv4": "10.244.1.5/24", "ipv6": "fd00:10:244:1::5/64", "mac": "02:76:0a:f4:01:05", "node": "node-b", "pod": "prod/web-1", "heldUntil": 7},
	}}
	obj, err := slimClaim(full)
	if err != nil {
		t.Fatal(err)
	}
	slim := obj.(*unstructured.Unstructured)
	if slim.GetLabels() != nil || slim.GetManagedFields() != nil {
		t.Errorf("slim claim kept %v %v", slim.GetLabels(), slim.GetManagedFields())
	}
	want := claim{VM: "prod/web", ResourceVersion: "42", Status: claimStatus{IPv4: "10.244.1.5/24", IPv6: "fd00:10:244:1::5/64", MAC: "02:76:0a:f4:01:05", Node: "node-b", Pod: "prod/web-1"}}
	created := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	for what, u := range map[string]*unstructured.Unstructured{"slim": slim, "whole": full} {
		got := claimFromObject(u)
		if !got.Created.Equal(created) {
			t.Errorf("%s: created %v, want %v (the older of two clashing claims holds)", what, got.Created, created)
		}
		got.Created = time.Time{}
		if got != want {
			t.Errorf("%s: claim %+v, want %+v", what, got, want)
		}
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "prod/web", Obj: slim}
	if got, _ := slimClaim(tomb); got != tomb {
		t.Errorf("a tombstone came out as %v", got)
	}
}

// TestClaimsList: list reads a claim again when the informer stores a new
// object for it, drops one it deleted, and says whether anything changed
// and which claims; by the informer's noted changes (as vmlaned runs it)
// and by reading the cache whole (without them).
func TestClaimsList(t *testing.T) {
	obj := func(name, node, rv string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"name": name, "namespace": "default", "resourceVersion": rv},
			"status":   map[string]any{"ipv4": "10.244.1.5/24", "mac": "02:76:0a:f4:01:05", "node": node},
		}}
	}
	for _, noted := range []bool{true, false} {
		t.Run(fmt.Sprintf("noted changes %v", noted), func(t *testing.T) {
			store := cache.NewStore(cache.MetaNamespaceKeyFunc)
			s := &claimsSync{claims: store}
			if noted {
				s.changes = &claimChanges{}
			}
			change := func(op func(any) error, o *unstructured.Unstructured) {
				if err := op(o); err != nil {
					t.Fatal(err)
				}
				if noted {
					s.changes.note(o)
				}
			}
			list := func(wantChanged bool, changed []string, want ...string) {
				t.Helper()
				var got []string
				for _, c := range s.list() {
					got = append(got, c.VM+"@"+c.Status.Node)
				}
				listChanged := s.staleAll || len(s.stale) > 0
				if !slices.Equal(got, want) || listChanged != wantChanged {
					t.Errorf("list %v (changed %v), want %v (changed %v)", got, listChanged, want, wantChanged)
				}
				if noted {
					if got := slices.Sorted(maps.Keys(s.stale)); !slices.Equal(got, changed) {
						t.Errorf("claims to check again %v, want %v", got, changed)
					}
				}
				s.stale, s.staleAll = nil, false // as apply takes them
			}
			change(store.Add, obj("web", "node-a", "1"))
			change(store.Add, obj("db", "node-a", "1"))
			list(true, nil, "default/db@node-a", "default/web@node-a") // the first list reads them all (staleAll)
			list(false, nil, "default/db@node-a", "default/web@node-a")
			change(store.Update, obj("web", "node-b", "2"))
			list(true, []string{"default/web"}, "default/db@node-a", "default/web@node-b")
			change(store.Add, obj("app", "node-c", "3"))
			list(true, []string{"default/app"}, "default/app@node-c", "default/db@node-a", "default/web@node-b")
			change(store.Delete, obj("db", "node-a", "1"))
			list(true, []string{"default/db"}, "default/app@node-c", "default/web@node-b")
			list(false, nil, "default/app@node-c", "default/web@node-b")
		})
	}
}

// TestClaimsListBurst: a burst of changes, more than list takes one at a
// time, is read whole: every claim deleted at once leaves none, and the
// pass checks them all again.
func TestClaimsListBurst(t *testing.T) {
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	s := &claimsSync{claims: store, changes: &claimChanges{}}
	var objs []*unstructured.Unstructured
	for i := range 2 * bulkChanges {
		o := &unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"name": fmt.Sprintf("vm-%d", i), "namespace": "default"},
			"status":   map[string]any{"node": "node-b"},
		}}
		objs = append(objs, o)
		if err := store.Add(o); err != nil {
			t.Fatal(err)
		}
		s.changes.note(o)
	}
	if got := len(s.list()); got != len(objs) {
		t.Fatalf("listed %d claims, want %d", got, len(objs))
	}
	s.staleAll = false // as apply takes it
	for _, o := range objs {
		if err := store.Delete(o); err != nil {
			t.Fatal(err)
		}
		s.changes.note(o)
	}
	if got := s.list(); len(got) != 0 || !s.staleAll {
		t.Errorf("after every claim went: listed %d, check all again %v; want none, true", len(got), s.staleAll)
	}
}

// TestWriteMirrorAfterARefusal: the plugin's copy written without a claim
// this pass refused (its address held here by a lease) gets the claim
// back once a pass refuses nothing, though the claims did not change.
func TestWriteMirrorAfterARefusal(t *testing.T) {
	dir := t.TempDir()
	s := &claimsSync{c: &config{LeaseFile: filepath.Join(dir, "leases.json")}, log: slog.New(slog.DiscardHandler)}
	web := plugin.NodeClaim{VM: "default/web", IPv4: netip.MustParsePrefix("10.244.1.5/24"), MAC: "02:76:0a:f4:01:05", Node: "node-b"}
	x := plugin.NodeClaim{VM: "default/x", IPv4: netip.MustParsePrefix("10.244.1.9/24"), MAC: "02:76:0a:f4:01:09", Node: "node-c"}
	read := func() []string {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(dir, plugin.ClaimsFileName))
		if err != nil {
			t.Fatal(err)
		}
		var f plugin.ClaimsFile
		if err := json.Unmarshal(data, &f); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		var vms []string
		for _, c := range f.Claims {
			vms = append(vms, c.VM)
		}
		return vms
	}
	s.writeMirror(plugin.ClaimsFile{Version: 1, Claims: []plugin.NodeClaim{web}}, false) // x refused
	if got := read(); !slices.Equal(got, []string{"default/web"}) {
		t.Errorf("copy %v, want default/web's alone", got)
	}
	s.writeMirror(plugin.ClaimsFile{Version: 1, Claims: []plugin.NodeClaim{web, x}}, true) // apply's, nothing refused
	if got := read(); !slices.Equal(got, []string{"default/web", "default/x"}) {
		t.Errorf("copy %v once nothing is refused, want both", got)
	}
}

// TestClaimsListByChanges: after any run of adds, updates and deletes,
// each noted, the list by the changes is the list of the whole cache.
func TestClaimsListByChanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	s := &claimsSync{claims: store, changes: &claimChanges{}}
	whole := &claimsSync{claims: store}
	for step := range 2000 {
		for range rng.IntN(4) {
			o := &unstructured.Unstructured{Object: map[string]any{
				"metadata": map[string]any{"name": fmt.Sprintf("vm-%d", rng.IntN(50)), "namespace": []string{"default", "prod"}[rng.IntN(2)], "resourceVersion": fmt.Sprint(step)},
				"status":   map[string]any{"node": fmt.Sprintf("node-%d", rng.IntN(5))},
			}}
			var err error
			if rng.IntN(3) == 0 {
				err = store.Delete(o)
			} else {
				err = store.Update(o) // adds what is not there
			}
			if err != nil {
				t.Fatal(err)
			}
			s.changes.note(o)
		}
		if got, want := s.list(), whole.list(); !slices.Equal(got, want) {
			t.Fatalf("step %d: list by the changes %v, want %v", step, got, want)
		}
	}
}

// TestSweepHostRoutes: on a real bridge, a host route that no live lease
// needs (an interrupted DEL's) goes, and a moved-in lease's missing one (a
// bridge made anew) comes back; other routes of the bridge stay.
func TestSweepHostRoutes(t *testing.T) {
	privtest.Require(t, "ip")
	node := netnstest.New(t, "node")
	node.MustRun(t, "ip", "link", "add", "vmlane0", "type", "bridge")
	node.MustRun(t, "ip", "link", "set", "vmlane0", "up")
	node.MustRun(t, "ip", "route", "add", "10.244.9.9/32", "dev", "vmlane0", "proto", "78", "scope", "link")
	node.MustRun(t, "ip", "route", "add", "10.244.9.8/32", "dev", "vmlane0", "proto", "77")
	f := &leases.File{Subnet: netip.MustParsePrefix("10.244.1.0/24"), Leases: []leases.Lease{{
		IP: netip.MustParseAddr("10.244.0.5"), Home: netip.MustParsePrefix("10.244.0.0/24"), MAC: "02:76:0a:f4:00:05",
		State: leases.StateReserved, Source: leases.SourceCNI, VMName: "default/web",
	}}}
	s := &claimsSync{c: &config{Bridge: "vmlane0"}, hosts: bridgeHostRoutes{}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	err := node.Do(func() error {
		have, err := s.hosts.List("vmlane0")
		if err != nil {
			return err
		}
		s.sweepHostRoutes(f, have, nil)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	out := node.MustRun(t, "ip", "route", "show", "dev", "vmlane0")
	if !strings.Contains(out, "10.244.0.5 proto 78 scope link") || strings.Contains(out, "10.244.9.9") || !strings.Contains(out, "10.244.9.8 proto 77") {
		t.Errorf("routes of vmlane0:\n%s\nwant 10.244.0.5 (proto 78) and the proto 77 route, not 10.244.9.9", out)
	}
}

// TestMirrorLive: the plugin's copy marks a claim Live when it names a pod
// of the VM on another node that is up, and only then; a node going down
// or coming up changes the copy though the claims did not.
func TestMirrorLive(t *testing.T) {
	nodes := testNodes("node-a", "node-b", "node-c")
	nodes.set("node-c", false)
	s := &claimsSync{c: &config{NodeName: "node-a", ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}},
		warned: map[string]string{}, nodes: nodes}
	mk := func(vm, ip, mac, node, pod string) claim {
		return claim{VM: "default/" + vm, Status: claimStatus{IPv4: ip + "/24", MAC: mac, Node: node, Pod: pod}}
	}
	have := []claim{
		mk("here", "10.244.1.4", "02:76:0a:f4:01:04", "node-a", "default/here-1"),
		mk("held", "10.244.2.5", "02:76:0a:f4:02:05", "node-b", ""),
		mk("live", "10.244.2.6", "02:76:0a:f4:02:06", "node-b", "default/live-1"),
		mk("down", "10.244.3.7", "02:76:0a:f4:03:07", "node-c", "default/down-1"),
	}
	live := func() string {
		_, mirror, _ := s.apply(have)
		var out []string
		for _, c := range mirror.Claims {
			if c.Live {
				out = append(out, c.VM+"@"+c.Pod)
			}
		}
		slices.Sort(out)
		return strings.Join(out, " ")
	}
	if got := live(); got != "default/live@default/live-1" {
		t.Errorf("Live claims %q, want default/live's alone", got)
	}
	nodes.set("node-c", true)
	if got := live(); got != "default/down@default/down-1 default/live@default/live-1" {
		t.Errorf("node-c up: Live claims %q, want default/down's too", got)
	}
}

// TestApplyChecksWhatChanged: with the informer's changes, a pass checks
// again the claims that changed (an address taken from another claim, an
// address outside the pod network, a claim deleted), and a held claim
// whose hold time passed with nothing else changing goes from the copy
// and the routes all the same.
func TestApplyChecksWhatChanged(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	now := t0
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	s := &claimsSync{c: &config{NodeName: "node-a", ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}},
		claims: store, changes: &claimChanges{}, warned: map[string]string{}, nodes: testNodes("node-a", "node-b", "node-c"),
		now: func() time.Time { return now }, log: slog.New(slog.DiscardHandler)}
	put := func(name, ip, mac, node, heldUntil string, age int) {
		o := &unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"name": name, "namespace": "default", "resourceVersion": fmt.Sprint(now.UnixNano()),
				"creationTimestamp": t0.Add(time.Duration(age) * time.Second).Format(time.RFC3339)},
			"status": map[string]any{"ipv4": ip + "/24", "mac": mac, "node": node, "heldUntil": heldUntil},
		}}
		if err := store.Update(o); err != nil {
			t.Fatal(err)
		}
		s.changes.note(o)
	}
	routed := func(want ...string) {
		t.Helper()
		vms, mirror, _ := s.apply(s.list())
		var got, copied []string
		for _, v := range vms {
			got = append(got, v.Name+"@"+v.Node)
		}
		for _, c := range mirror.Claims {
			copied = append(copied, c.VM+"@"+c.Node)
		}
		if !slices.Equal(got, want) || !slices.Equal(copied, want) {
			t.Errorf("routed %v, copied %v; want %v", got, copied, want)
		}
	}
	put("web", "10.244.2.5", "02:76:0a:f4:02:05", "node-b", "", 0)
	put("db", "10.244.2.6", "02:76:0a:f4:02:06", "node-b", "", 1)
	put("old", "10.244.3.7", "02:76:0a:f4:03:07", "node-c", t0.Add(time.Hour).Format(time.RFC3339), 2)
	routed("default/db@node-b", "default/old@node-c", "default/web@node-b")

	put("db", "10.244.2.5", "02:76:0a:f4:02:06", "node-c", "", 1) // web's address, and younger
	routed("default/old@node-c", "default/web@node-b")
	put("web", "10.245.2.5", "02:76:0a:f4:02:05", "node-b", "", 0) // outside the pod network: db holds the address now
	routed("default/db@node-c", "default/old@node-c")
	put("web", "10.244.2.7", "02:76:0a:f4:02:05", "node-b", "", 0)
	s.list() // a list without an apply: its changes wait for the next
	routed("default/db@node-c", "default/old@node-c", "default/web@node-b")

	now = t0.Add(2 * time.Hour) // old's hold time passed; no claim changed
	routed("default/db@node-c", "default/web@node-b")

	put("db", "10.244.2.7", "02:76:0a:f4:02:06", "node-c", "", 1) // web's address again
	routed("default/web@node-b")
	// web goes: db, which named its address, is routed.
	if err := store.Delete(&unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "web", "namespace": "default"}}}); err != nil {
		t.Fatal(err)
	}
	s.changes.note(&unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "web", "namespace": "default"}}})
	routed("default/db@node-c")
}

// fakeNodes is the cluster's Nodes as a test gives them: node-a has
// 10.244.1.0/24, node-b 10.244.2.0/24, and so on.
type fakeNodes struct {
	byName map[string]routes.Node
	gen    uint64
}

func (f *fakeNodes) Node(name string) (routes.Node, bool) { n, ok := f.byName[name]; return n, ok }
func (f *fakeNodes) NodesGeneration() uint64              { return f.gen }

// testNodes makes the named nodes, Ready, each with the /24 of its letter.
func testNodes(names ...string) *fakeNodes {
	f := &fakeNodes{byName: map[string]routes.Node{}}
	for _, n := range names {
		i := int(n[len(n)-1]-'a') + 1
		f.byName[n] = routes.Node{Name: n, Ready: true, PodCIDRs: []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("10.244.%d.0/24", i))}}
	}
	return f
}

// set makes a node Ready or not.
func (f *fakeNodes) set(name string, ready bool) {
	n := f.byName[name]
	n.Ready = ready
	f.byName[name] = n
	f.gen++
}

// remove takes a node out of the cluster.
func (f *fakeNodes) remove(name string) {
	delete(f.byName, name)
	f.gen++
}

// TestClaimOfALeasedAddress: a claim that names, for a VM elsewhere, an
// address a lease of this (home) node holds, a plain pod's, is refused by
// holdLent, and the pass neither routes nor proxies it nor copies it for
// the plugin; a claim of a free address is held as before.
func TestClaimOfALeasedAddress(t *testing.T) {
	sub := netip.MustParsePrefix("10.244.1.0/24")
	store, err := leases.Open(filepath.Join(t.TempDir(), "leases.json"), sub, sub.Addr().Next())
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.Reserve(leases.ReserveRequest{Key: leases.Key{ContainerID: "db-0", IfName: "eth0"}, IP: netip.MustParseAddr("10.244.1.9"),
		MACFor: plugin.DeriveMAC, Pod: leases.Pod{Namespace: "bank", Name: "db-0"}})
	if err != nil {
		t.Fatal(err)
	}
	s := &claimsSync{c: &config{Bridge: "vmlane0", NodeName: "node-a"}, store: store, warned: map[string]string{},
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	hijack := plugin.NodeClaim{VM: "attacker/x", IPv4: netip.MustParsePrefix("10.244.1.9/24"), MAC: db.MAC, Node: "node-c", Pod: "attacker/x-1"}
	web := plugin.NodeClaim{VM: "default/web", IPv4: netip.MustParsePrefix("10.244.1.5/24"), MAC: "02:76:0a:f4:01:05", Node: "node-b", Pod: "default/web-1"}
	refused := s.holdLent([]plugin.NodeClaim{hijack, web})
	if !refused["attacker/x"] || refused["default/web"] {
		t.Fatalf("refused %v, want attacker/x alone", refused)
	}
	vms := []routes.VM{{Name: "attacker/x", Node: "node-c"}, {Name: "default/web", Node: "node-b"}}
	mirror := plugin.ClaimsFile{Version: 1, Claims: []plugin.NodeClaim{hijack, web}}
	vms, mirror, lent := withoutVMs(vms, mirror, []plugin.NodeClaim{hijack, web}, refused)
	if len(vms) != 1 || vms[0].Name != "default/web" || len(mirror.Claims) != 1 || len(lent) != 1 {
		t.Errorf("after refusal: routes %v, copy %v, lent %v; want default/web's alone", vms, mirror.Claims, lent)
	}
	ls, _ := store.List()
	for _, l := range ls {
		if l.IP == db.IP && l.Pod.Name != "db-0" {
			t.Errorf("the pod's address is now %+v", l)
		}
	}
}

// TestAwayLent: the bridge's table of away MACs and moved-in ports follows
// the VMs of this node's subnets that run elsewhere and the guests that
// moved in, written when they change, not at every pass, and written again
// after a failure.
func TestAwayLent(t *testing.T) {
	var writes []string
	fail := false
	s := &claimsSync{c: &config{Bridge: "vmlane0"}, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		away: func(br string, _ []netip.Prefix, macs, ports []string) error {
			if br != "vmlane0" {
				t.Errorf("bridge %q", br)
			}
			writes = append(writes, fmt.Sprint(macs, ports))
			if fail {
				return errors.New("no nftables")
			}
			return nil
		}}
	lent := func(macs ...string) []plugin.NodeClaim {
		var out []plugin.NodeClaim
		for _, m := range macs {
			out = append(out, plugin.NodeClaim{VM: "default/" + m, MAC: m, Node: "node-b"})
		}
		return out
	}
	s.awayLent(nil, nil)                                                                   // first pass: written (a restart clears what was there)
	s.awayLent(nil, nil)                                                                   // unchanged
	s.awayLent(lent("02:76:0a:f4:00:07", "02:76:0a:f4:00:06"), nil)                        // a VM left
	s.awayLent(lent("02:76:0a:f4:00:06", "02:76:0a:f4:00:07"), nil)                        // the same, in another order
	s.awayLent(lent("02:76:0a:f4:00:06", "02:76:0a:f4:00:07"), []string{"vml0123456789a"}) // a VM moved in
	fail = true
	s.awayLent(lent("02:76:0a:f4:00:06"), []string{"vml0123456789a"}) // one came back: the write fails
	fail = false
	s.awayLent(lent("02:76:0a:f4:00:06"), []string{"vml0123456789a"}) // tried again
	want := []string{"[] []", "[02:76:0a:f4:00:06 02:76:0a:f4:00:07] []", "[02:76:0a:f4:00:06 02:76:0a:f4:00:07] [vml0123456789a]",
		"[02:76:0a:f4:00:06] [vml0123456789a]", "[02:76:0a:f4:00:06] [vml0123456789a]"}
	if !slices.Equal(writes, want) {
		t.Errorf("writes %q, want %q", writes, want)
	}
}

// TestMovedInPorts: the ports of live leases that moved in, and no other.
func TestMovedInPorts(t *testing.T) {
	p := netip.MustParsePrefix
	f := &leases.File{Subnet: p("10.244.1.0/24"), Leases: []leases.Lease{
		{IP: netip.MustParseAddr("10.244.0.5"), Home: p("10.244.0.0/24"), MAC: "02:76:0a:f4:00:05", State: leases.StateReserved,
			Source: leases.SourceCNI, VMName: "default/in", ContainerID: "c1", BridgePort: "vml0000000000a"},
		{IP: netip.MustParseAddr("10.244.2.7"), Home: p("10.244.2.0/24"), MAC: "02:76:0a:f4:02:07", State: leases.StateHeld,
			Source: leases.SourceCNI, VMName: "default/held", BridgePort: "vml0000000000b"},
		{IP: netip.MustParseAddr("10.244.1.9"), MAC: "02:76:0a:f4:01:09", State: leases.StateBound, Source: leases.SourceCNI,
			VMName: "default/home", ContainerID: "c3", BridgePort: "vml0000000000c"},
	}}
	if got := movedInPorts(f); !slices.Equal(got, []string{"vml0000000000a"}) {
		t.Errorf("movedInPorts = %q, want the moved-in live lease's port only", got)
	}
	if got := movedInPorts(nil); got != nil {
		t.Errorf("movedInPorts(nil) = %q", got)
	}
}

// TestMovedInGuests: the guests of live leases whose IPv6 address moved in,
// with their ports, MACs and home subnets, and the IPv6 addresses of every
// live lease, which the node never answers for.
func TestMovedInGuests(t *testing.T) {
	p, a := netip.MustParsePrefix, netip.MustParseAddr
	f := &leases.File{Subnet: p("10.244.1.0/24"), Leases: []leases.Lease{
		{IP: a("10.244.0.5"), Home: p("10.244.0.0/24"), IP6: a("fd00:10:244::5"), Home6: p("fd00:10:244::/64"), MAC: "02:76:0a:f4:00:05",
			State: leases.StateBound, Source: leases.SourceCNI, VMName: "default/in", ContainerID: "c1", BridgePort: "vml0000000000a"},
		{IP: a("10.244.2.7"), Home: p("10.244.2.0/24"), IP6: a("fd00:10:244:2::7"), Home6: p("fd00:10:244:2::/64"), MAC: "02:76:0a:f4:02:07",
			State: leases.StateHeld, Source: leases.SourceCNI, VMName: "default/held", BridgePort: "vml0000000000b"},
		{IP: a("10.244.1.9"), IP6: a("fd00:10:244:1::9"), MAC: "02:76:0a:f4:01:09", State: leases.StateBound, Source: leases.SourceCNI,
			VMName: "default/home", ContainerID: "c3", BridgePort: "vml0000000000c"},
		{IP: a("10.244.3.4"), Home: p("10.244.3.0/24"), MAC: "02:76:0a:f4:03:04", State: leases.StateBound, Source: leases.SourceCNI,
			VMName: "default/v4only", ContainerID: "c4", BridgePort: "vml0000000000d"},
	}}
	guests, onBridge := movedInGuests(f)
	if len(guests) != 1 || guests[0].Port != "vml0000000000a" || guests[0].MAC.String() != "02:76:0a:f4:00:05" || guests[0].Home != p("fd00:10:244::/64") {
		t.Errorf("movedInGuests: guests %+v, want the moved-in live lease with IPv6 alone", guests)
	}
	if want := []netip.Addr{a("fd00:10:244::5"), a("fd00:10:244:1::9")}; !slices.Equal(onBridge, want) {
		t.Errorf("movedInGuests: on the bridge %v, want %v (the live leases' IPv6)", onBridge, want)
	}
	if g, o := movedInGuests(nil); g != nil || o != nil {
		t.Errorf("movedInGuests(nil) = %v, %v", g, o)
	}
}

type fakeND struct {
	syncs  []string
	fail   bool
	closed bool
}

func (f *fakeND) Sync(guests []ndproxy.Guest, onBridge []netip.Addr) error {
	var ports []string
	for _, g := range guests {
		ports = append(ports, g.Port)
	}
	f.syncs = append(f.syncs, fmt.Sprint(ports, onBridge))
	if f.fail {
		return errors.New("no packet sockets")
	}
	return nil
}

func (f *fakeND) Close() { f.closed = true }

// TestAnswerMovedIn: the responder is given the guests when they change,
// not at every pass, and again after a failure.
func TestAnswerMovedIn(t *testing.T) {
	s := &claimsSync{c: &config{Bridge: "vmlane0"}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	s.answerMovedIn(nil, nil)
	if s.nd != nil {
		t.Fatal("a responder made with no guest that moved in")
	}
	nd := &fakeND{}
	s.nd = nd
	g := ndproxy.Guest{Port: "vml0123456789a", MAC: net.HardwareAddr{2, 0x76, 10, 0xf4, 0, 5}, Home: netip.MustParsePrefix("fd00:10:244::/64")}
	on := []netip.Addr{netip.MustParseAddr("fd00:10:244::5")}
	s.answerMovedIn([]ndproxy.Guest{g}, on)
	s.answerMovedIn([]ndproxy.Guest{g}, on) // unchanged
	nd.fail = true
	s.answerMovedIn(nil, nil) // it went: the sync fails
	nd.fail = false
	s.answerMovedIn(nil, nil) // tried again
	s.answerMovedIn(nil, nil) // unchanged
	want := []string{"[vml0123456789a] [fd00:10:244::5]", "[] []", "[] []"}
	if !slices.Equal(nd.syncs, want) {
		t.Errorf("syncs %q, want %q", nd.syncs, want)
	}
}

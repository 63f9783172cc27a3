package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/vmlane/vmlane/internal/peer"
	"github.com/vmlane/vmlane/routes"
)

// TestPeerNotices: node-b's notice that VM default/web runs there reaches
// node-c over UDP (loopback addresses stand for the nodes' own), and
// node-c's claims then route web to node-b before the claim says so; the
// claim's update ends it. A notice from an address that is not the
// sender's Node's, one under another key and one of a VM without a claim
// change nothing and are counted.
func TestPeerNotices(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	nodes := testNodes("node-a", "node-b", "node-c")
	for i, n := range []string{"node-a", "node-b", "node-c"} {
		x := nodes.byName[n]
		x.Addrs = []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, byte(i + 1)})}
		nodes.byName[n] = x
	}
	list := func() []routes.Node {
		return []routes.Node{nodes.byName["node-a"], nodes.byName["node-b"], nodes.byName["node-c"]}
	}
	port := freeUDPPort(t, "127.0.0.3")
	log := slog.New(slog.DiscardHandler)
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	put := func(rv, node, pod string) {
		o := &unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"name": "web", "namespace": "default", "resourceVersion": rv, "creationTimestamp": "2026-11-28T12:00:00Z"},
			"status":   map[string]any{"ipv4": "10.244.1.5/24", "mac": "02:76:0a:f4:01:05", "node": node, "pod": pod, "home": "node-a"},
		}}
		if err := store.Update(o); err != nil {
			t.Fatal(err)
		}
	}
	put("10", "node-a", "default/web-a")
	s := &claimsSync{c: &config{NodeName: "node-c", ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}},
		claims: store, warned: map[string]string{}, nodes: nodes, log: log}
	routed := func() []string {
		vms, _, _ := s.apply(s.overlay(s.list()))
		var out []string
		for _, v := range vms {
			out = append(out, v.Name+"@"+v.Node)
		}
		return out
	}
	if got := routed(); !slices.Equal(got, []string{"default/web@node-a"}) {
		t.Fatalf("before any notice: %v", got)
	}

	counted := newPeerNoticesCounter(prometheus.NewRegistry())
	recv, err := openPeers(key, port, nodes.byName["node-c"], list, counted, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	poked := make(chan struct{}, 8)
	recv.serve(ctx, func(n peer.Notice, src netip.Addr) error { return s.takeNotice(n, src, func() { poked <- struct{}{} }) })

	notice := peer.Notice{From: "node-b", VM: "default/web", Pod: "default/web-b", ResourceVersion: "10", Sent: time.Now().UnixMilli()}
	// Forged: node-b's name from node-a's address, and under another key.
	forger, err := openPeers(key, port, routes.Node{Name: "node-b", Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}, list, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	defer forger.close()
	forger.send([]peer.Notice{notice})
	other, err := openPeers([]byte("another key of thirty-two bytes!"), port, nodes.byName["node-b"], list, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	other.send([]peer.Notice{notice})
	other.close()
	waitCount(t, counted, "refused", 1)
	waitCount(t, counted, "bad", 1)
	// Well sent, of a VM that has no claim here: it is not kept.
	unknown, err := openPeers(key, port, nodes.byName["node-b"], list, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	stray := notice
	stray.VM = "default/nosuchvm"
	unknown.send([]peer.Notice{stray})
	unknown.close()
	waitCount(t, counted, "refused", 2)
	if s.moves.pending() {
		t.Errorf("moves %v after a notice of a VM without a claim", s.moves.moves)
	}
	if got := routed(); !slices.Equal(got, []string{"default/web@node-a"}) {
		t.Fatalf("after forged notices: %v", got)
	}

	sender, err := openPeers(key, port, nodes.byName["node-b"], list, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	defer sender.close()
	sender.send([]peer.Notice{notice})
	select {
	case <-poked:
	case <-time.After(5 * time.Second):
		t.Fatal("node-c took no notice within 5 s")
	}
	if n := testutil.ToFloat64(counted.WithLabelValues("taken")); n != 1 {
		t.Errorf("taken %v, want 1", n)
	}
	if got := routed(); !slices.Equal(got, []string{"default/web@node-b"}) {
		t.Errorf("after node-b's notice: %v", got)
	}
	// The claim's update comes (here, as the notice had it): the move is
	// done with, and the claim says where web is.
	put("11", "node-b", "default/web-b")
	if got := routed(); !slices.Equal(got, []string{"default/web@node-b"}) || s.moves.pending() {
		t.Errorf("after the update: %v, moves %v", got, s.moves.moves)
	}
}

// TestTakeHeard: the pass that hears a migrated guest takes the claim for
// its node ahead of the update, and sends every other node a notice of
// it; nothing else it plans (a VM not heard, a claim created) does either.
func TestTakeHeard(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	nodes := testNodes("node-a", "node-b")
	for i, n := range []string{"node-a", "node-b"} {
		x := nodes.byName[n]
		x.Addrs = []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, byte(i + 1)})}
		nodes.byName[n] = x
	}
	list := func() []routes.Node { return []routes.Node{nodes.byName["node-a"], nodes.byName["node-b"]} }
	port := freeUDPPort(t, "127.0.0.1")
	log := slog.New(slog.DiscardHandler)
	recv, err := openPeers(key, port, nodes.byName["node-a"], list, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan peer.Notice, 4)
	recv.serve(ctx, func(n peer.Notice, _ netip.Addr) error { got <- n; return nil })
	sender, err := openPeers(key, port, nodes.byName["node-b"], list, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	defer sender.close()
	s := &claimsSync{c: &config{NodeName: "node-b"}, peers: sender, log: log}

	now := time.Now()
	acts := []claimAction{
		{Op: "update", VM: "default/web", ResourceVersion: "10", Status: claimStatus{Node: "node-b", Pod: "default/web-b"}},
		{Op: "update", VM: "default/db", ResourceVersion: "20", Status: claimStatus{Node: "node-b", Pod: "default/db-b"}},
		{Op: "create", VM: "default/new", Status: claimStatus{Node: "node-b", Pod: "default/new-b"}},
	}
	heard := map[string]bool{"default/web": true}
	notices := s.takeHeard(acts, heard, now)
	if len(notices) != 1 {
		t.Fatalf("notices %+v, want web's", notices)
	}
	if n := s.takeHeard(acts[1:], heard, now); len(n) != 0 {
		t.Errorf("took claims it did not hear: %+v", n)
	}
	// The next pass plans the same update (the last one failed): nothing
	// new to take or tell, and the hold still counts from the first.
	if n := s.takeHeard(acts, heard, now.Add(time.Second)); len(n) != 0 {
		t.Errorf("told again: %+v", n)
	}
	want := peerMove{Node: "node-b", Pod: "default/web-b", RV: "10", Until: now.Add(peerHold)}
	if mv := s.moves.moves; len(mv) != 1 || mv["default/web"] != want {
		t.Errorf("moves %+v, want web's only, %+v", mv, want)
	}
	sender.send(notices)
	select {
	case n := <-got:
		if n.From != "node-b" || n.VM != "default/web" || n.Pod != "default/web-b" || n.ResourceVersion != "10" || n.Sent != now.UnixMilli() {
			t.Errorf("notice %+v", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("node-a got no notice within 5 s")
	}
	select {
	case n := <-got:
		t.Errorf("a second notice: %+v", n)
	case <-time.After(100 * time.Millisecond):
	}
}

// freeUDPPort is a UDP port free on addr just now.
func freeUDPPort(t *testing.T, addr string) uint16 {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(addr), 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Port()
}

func waitCount(t *testing.T, v *prometheus.CounterVec, result string, want float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(v.WithLabelValues(result)) < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s notices: %v, want %v", result, testutil.ToFloat64(v.WithLabelValues(result)), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkPeerSend: the target's cost of telling 5,000 Nodes of one
// migration (a sealed notice written to each Node's address; here every
// Node's address is one loopback socket, which drops what it cannot
// queue), against the floor of the same 5,000 writes of bytes made once.
// The Nodes are a slice made once: the route controller's cache read
// (routes.FromNode of each Node) is not in it.
func BenchmarkPeerSend(b *testing.B) {
	key := []byte("0123456789abcdef0123456789abcdef")
	sink, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.2:0")))
	if err != nil {
		b.Fatal(err)
	}
	defer sink.Close()
	port := sink.LocalAddr().(*net.UDPAddr).AddrPort().Port()
	nodes := make([]routes.Node, 5000)
	for i := range nodes {
		nodes[i] = routes.Node{Name: fmt.Sprintf("node-%d", i), Ready: true, Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.2")}}
	}
	self := routes.Node{Name: "node-self", Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}
	p, err := openPeers(key, port, self, func() []routes.Node { return nodes }, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer p.close()
	notice := []peer.Notice{{From: "node-self", VM: "default/web", Pod: "default/virt-launcher-web-x7k2p", ResourceVersion: "4711", Sent: time.Now().UnixMilli()}}
	b.Run("notice-to-5000-nodes", func(b *testing.B) {
		for b.Loop() {
			p.send(notice)
		}
	})
	sealed, err := peer.Seal(key, notice[0])
	if err != nil {
		b.Fatal(err)
	}
	to := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), port)
	b.Run("floor-5000-writes", func(b *testing.B) {
		for b.Loop() {
			for range nodes {
				if _, err := p.conns[0].WriteToUDPAddrPort(sealed, to); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

package routes

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/privtest"
)

// kernelNode is a netns with eth0 (192.168.77.1/24) on a veth to a peer
// netns (192.168.77.2), so 192.168.77.2 is a directly reachable next hop and
// 10.0.0.9 (via the peer) is not.
func kernelNode(t *testing.T) *netnstest.NS {
	t.Helper()
	privtest.Require(t, "ip", "iptables")
	n := netnstest.New(t, "rt")
	peer := netnstest.New(t, "peer")
	n.MustRun(t, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p")
	n.MustRun(t, "ip", "link", "set", "eth0p", "netns", peer.Name)
	n.MustRun(t, "ip", "addr", "add", "192.168.77.1/24", "dev", "eth0")
	n.MustRun(t, "ip", "link", "set", "eth0", "up")
	peer.MustRun(t, "ip", "addr", "add", "192.168.77.2/24", "dev", "eth0p")
	peer.MustRun(t, "ip", "link", "set", "eth0p", "up")
	n.MustRun(t, "ip", "route", "add", "10.0.0.0/24", "via", "192.168.77.2")
	return n
}

func routeLines(t *testing.T, n *netnstest.NS) string {
	return n.MustRun(t, "ip", "route", "show")
}

func TestKernelReconcile(t *testing.T) {
	n := kernelNode(t)
	n.MustRun(t, "ip", "route", "add", "10.99.0.0/24", "via", "192.168.77.2", "proto", "static") // foreign
	n.MustRun(t, "ip", "route", "add", "10.98.0.0/24", "via", "192.168.77.2", "proto", "77")     // stale, ours
	want := []Route{
		{Dst: netip.MustParsePrefix("10.244.1.0/24"), Via: netip.MustParseAddr("192.168.77.2"), Node: "b"},
		{Dst: netip.MustParsePrefix("10.99.0.0/24"), Via: netip.MustParseAddr("192.168.77.2"), Node: "c"},
		{Dst: netip.MustParsePrefix("10.244.2.0/24"), Via: netip.MustParseAddr("10.0.0.9"), Node: "far"},
	}
	var out Outcome
	err := n.Do(func() (err error) {
		out, err = Reconcile(NewKernelTable(), want, DefaultProtocol)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	got := routeLines(t, n)
	for _, line := range []string{
		"10.244.1.0/24 via 192.168.77.2 dev eth0 proto 77",
		"10.99.0.0/24 via 192.168.77.2 dev eth0 proto static",
	} {
		if !strings.Contains(got, line) {
			t.Errorf("missing %q in:\n%s", line, got)
		}
	}
	for _, gone := range []string{"10.98.0.0/24", "10.244.2.0/24"} {
		if strings.Contains(got, gone) {
			t.Errorf("%s should not be routed:\n%s", gone, got)
		}
	}
	if len(out.Foreign) != 1 || len(out.Unreachable) != 1 || len(out.Deleted) != 1 {
		t.Errorf("outcome %+v", out)
	}
}

func TestKernelRouteDeletedByHandComesBack(t *testing.T) {
	n := kernelNode(t)
	want := []Route{{Dst: netip.MustParsePrefix("10.244.1.0/24"), Via: netip.MustParseAddr("192.168.77.2")}}
	loop := &Loop{
		// Table is set inside the netns below: a kernel table binds to
		// the netns it is made in.
		Proto:   DefaultProtocol,
		Resync:  time.Hour, // only the delete event can bring it back in time
		Desired: func() Desired { return Desired{Routes: want} },
	}
	loop.Init()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan error, 1)
	go n.Do(func() error {
		// Subscribe and reconcile from inside the netns; the netlink
		// socket keeps the netns it was opened in.
		loop.Table = NewKernelTable()
		err := WatchDeletes(DefaultProtocol, ctx.Done(), loop.Trigger)
		ready <- err
		if err == nil {
			loop.Run(ctx)
		}
		return nil
	})
	if err := <-ready; err != nil {
		t.Fatal(err)
	}
	waitFor := func(cond func(string) bool, what string) {
		t.Helper()
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) {
			if cond(routeLines(t, n)) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("%s within 1s; routes:\n%s", what, routeLines(t, n))
	}
	has := func(s string) bool { return strings.Contains(s, "10.244.1.0/24 via 192.168.77.2") }
	waitFor(has, "route installed")
	n.MustRun(t, "ip", "route", "del", "10.244.1.0/24")
	waitFor(has, "route restored after a delete by hand")
}

// TestWatchDeletesSurvivesOverflow overflows WatchDeletes' socket: fn
// blocks on the first delete while 2,000 routes are added, so the events
// pile up in a socket shrunk to a few KiB until the kernel drops them. The
// library then ends the subscription. WatchDeletes must say events were
// lost (fn, with no delete since) and go on watching the same netns,
// though it subscribes again from another thread.
func TestWatchDeletesSurvivesOverflow(t *testing.T) {
	n := kernelNode(t)
	defer func(b int) { routeEventBuffer = b }(routeEventBuffer)
	routeEventBuffer = 4096
	n.MustRun(t, "ip", "route", "add", "10.244.1.0/24", "via", "192.168.77.2", "proto", "77")
	n.MustRun(t, "ip", "route", "add", "10.244.2.0/24", "via", "192.168.77.2", "proto", "77")
	calls := make(chan struct{}, 16)
	release := make(chan struct{})
	first := true
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := n.Do(func() error {
		return WatchDeletes(DefaultProtocol, ctx.Done(), func() {
			if first {
				first = false
				<-release
			}
			calls <- struct{}{}
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	wait := func(what string) {
		t.Helper()
		select {
		case <-calls:
		case <-time.After(5 * time.Second):
			t.Fatalf("fn not called within 5s: %s", what)
		}
	}
	n.MustRun(t, "ip", "route", "del", "10.244.1.0/24")
	time.Sleep(100 * time.Millisecond) // fn is blocked now
	var batch strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&batch, "route add 10.%d.%d.0/24 via 192.168.77.2 proto static\n", 100+i/256, i%256)
	}
	file := filepath.Join(t.TempDir(), "routes")
	if err := os.WriteFile(file, []byte(batch.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	n.MustRun(t, "ip", "-batch", file)
	close(release)
	wait("the blocked call for the first delete")
	wait("events were lost, with no delete since")
	select {
	case <-calls:
		t.Fatal("fn called again with no delete")
	case <-time.After(300 * time.Millisecond):
	}
	n.MustRun(t, "ip", "route", "del", "10.244.2.0/24")
	wait("a delete after the overflow: the subscription was renewed, in the node's netns")
}

func TestKernelIPTables(t *testing.T) {
	n := kernelNode(t)
	chains := Chains(NATOptions{PodCIDR: netip.MustParsePrefix("10.244.1.0/24"), Cluster: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}, Masquerade: true})
	ensure := func() bool {
		t.Helper()
		var changed bool
		err := n.Do(func() error {
			ipt, err := NewIPTables(false)
			if err != nil {
				return err
			}
			changed, err = EnsureChains(ipt, chains)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return changed
	}
	if !ensure() {
		t.Fatal("first EnsureChains changed nothing")
	}
	if ensure() {
		t.Error("second EnsureChains changed something")
	}
	nat := n.MustRun(t, "iptables", "-t", "nat", "-S")
	for _, want := range []string{
		`-A POSTROUTING -m comment --comment "vmlane: pod subnet NAT rules" -j VMLANE-POSTROUTING`,
		`-A VMLANE-POSTROUTING -s 10.244.1.0/24 -d 10.244.0.0/16 -m comment --comment "vmlane: pod to pod network 10.244.0.0/16, no NAT" -j RETURN`,
		`-A VMLANE-POSTROUTING -s 10.244.1.0/24 -m comment --comment "vmlane: pod to outside, masquerade" -j MASQUERADE`,
	} {
		if !strings.Contains(nat, want) {
			t.Errorf("nat table lacks %q:\n%s", want, nat)
		}
	}
	n.MustRun(t, "iptables", "-t", "nat", "-D", "VMLANE-POSTROUTING", "1")
	if !ensure() {
		t.Error("a rule deleted by hand was not restored")
	}
	if again := n.MustRun(t, "iptables", "-t", "nat", "-S"); again != nat {
		t.Errorf("after repair:\n%s\nwant:\n%s", again, nat)
	}
	err := n.Do(func() error {
		ipt, _ := NewIPTables(false)
		return RemoveChains(ipt, chains)
	})
	if err != nil {
		t.Fatal(err)
	}
	if s := n.MustRun(t, "iptables-save"); strings.Contains(s, "vmlane") || strings.Contains(s, "VMLANE") {
		t.Errorf("teardown left rules:\n%s", s)
	}
}

// TestKernelChainReplacementIsAtomic: while vmlane replaces its NAT chain
// again and again (two rule sets in turn, as a podCIDR or --cluster-cidr
// change would), iptables-save run beside it never shows the chain
// half-filled: only one set whole or the other.
func TestKernelChainReplacementIsAtomic(t *testing.T) {
	n := kernelNode(t)
	sets := [][]Chain{
		Chains(NATOptions{PodCIDR: netip.MustParsePrefix("10.244.1.0/24"), Cluster: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}, Masquerade: true}),
		Chains(NATOptions{PodCIDR: netip.MustParsePrefix("10.244.1.0/24"), Cluster: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/17"), netip.MustParsePrefix("10.244.128.0/17"), netip.MustParsePrefix("10.96.0.0/12")}, Masquerade: true}),
	}
	// What iptables-save prints of VMLANE-POSTROUTING for each set.
	var want [2]string
	for i, set := range sets {
		if err := n.Do(func() error {
			ipt, err := NewIPTables(false)
			if err != nil {
				return err
			}
			_, err = EnsureChains(ipt, set)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		want[i] = natChainLines(n.MustRun(t, "iptables-save", "-t", "nat"))
	}
	if want[0] == want[1] || want[0] == "" {
		t.Fatalf("the two sets print alike:\n%s", want[0])
	}
	stop := make(chan struct{})
	seen := make(chan []string, 1)
	go func() {
		var bad []string
		for saves := 0; ; saves++ {
			select {
			case <-stop:
				seen <- append(bad, fmt.Sprintf("(%d saves)", saves))
				return
			default:
			}
			out, err := n.Run("iptables-save", "-t", "nat")
			if err != nil {
				continue
			}
			if got := natChainLines(out); got != want[0] && got != want[1] {
				bad = append(bad, got)
			}
		}
	}()
	err := n.Do(func() error {
		ipt, err := NewIPTables(false)
		if err != nil {
			return err
		}
		for i := range 40 {
			if _, err := EnsureChains(ipt, sets[i%2]); err != nil {
				return err
			}
		}
		return nil
	})
	close(stop)
	bad := <-seen
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("iptables-save ran %s while the chain was replaced 40 times", bad[len(bad)-1])
	for _, b := range bad[:len(bad)-1] {
		t.Errorf("iptables-save saw a partial VMLANE-POSTROUTING:\n%s", b)
	}
}

// natChainLines are the -A lines of VMLANE-POSTROUTING in iptables-save
// output.
func natChainLines(save string) string {
	var out []string
	for _, l := range strings.Split(save, "\n") {
		if strings.HasPrefix(l, "-A "+ChainNAT+" ") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestKernelReplaceOwned: the fast path's replace installs and changes
// vmlane's host routes, and leaves a route of another protocol to exactly
// the same destination (the CNI plugin's host route) as it is; a next hop
// that is not directly reachable is refused, as by Replace.
func TestKernelReplaceOwned(t *testing.T) {
	n := kernelNode(t)
	n.MustRun(t, "ip", "route", "add", "10.244.9.6/32", "dev", "eth0", "proto", "78")
	n.MustRun(t, "ip", "route", "add", "10.244.9.8/32", "via", "192.168.77.2", "proto", "77")
	n.MustRun(t, "ip", "route", "add", "10.244.9.0/24", "via", "192.168.77.2", "proto", "77")
	via := netip.MustParseAddr("192.168.77.3")
	n.MustRun(t, "ip", "neigh", "add", "192.168.77.3", "lladdr", "02:00:00:00:00:03", "dev", "eth0")
	var errs []error
	err := n.Do(func() error {
		tb := NewKernelTable().(ownedReplacer)
		for _, dst := range []string{"10.244.9.6/32", "10.244.9.7/32", "10.244.9.8/32"} {
			errs = append(errs, tb.ReplaceOwned(netip.MustParsePrefix(dst), via, DefaultProtocol))
		}
		errs = append(errs, tb.ReplaceOwned(netip.MustParsePrefix("10.244.9.10/32"), netip.MustParseAddr("10.0.0.9"), DefaultProtocol))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(errs[0], errForeign) || errs[1] != nil || errs[2] != nil || errs[3] == nil {
		t.Errorf("ReplaceOwned: %v; want foreign, ok, ok, refused", errs)
	}
	got := routeLines(t, n)
	for _, line := range []string{
		"10.244.9.6 dev eth0 proto 78",
		"10.244.9.7 via 192.168.77.3 dev eth0 proto 77",
		"10.244.9.8 via 192.168.77.3 dev eth0 proto 77",
	} {
		if !strings.Contains(got, line) {
			t.Errorf("missing %q in:\n%s", line, got)
		}
	}
	if strings.Contains(got, "10.244.9.10") {
		t.Errorf("a route via an unreachable next hop:\n%s", got)
	}
}

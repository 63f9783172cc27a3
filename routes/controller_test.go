package routes

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/kubernetes/fake"
)

// flakyTable is a fakeTable whose first fails Replace calls fail, safe
// for the controller's goroutines.
type flakyTable struct {
	mu    sync.Mutex
	t     *fakeTable
	fails int
}

func (f *flakyTable) List() ([]KernelRoute, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t.List()
}

func (f *flakyTable) Replace(dst netip.Prefix, via netip.Addr, proto int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fails > 0 {
		f.fails--
		return fmt.Errorf("injected: RTNETLINK answers: no buffer space available")
	}
	return f.t.Replace(dst, via, proto)
}

func (f *flakyTable) Delete(r KernelRoute) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t.Delete(r)
}

func (f *flakyTable) Get(ip netip.Addr) (netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t.Get(ip)
}

func (f *flakyTable) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t.String()
}

// TestFailedReconcileRetriesWithBackoff: a reconcile that fails is tried
// again after the workqueue's backoff, not at the next resync (an hour
// here), and the route lands once the kernel takes it.
func TestFailedReconcileRetriesWithBackoff(t *testing.T) {
	// On synctest's clock: the backoff's 5+10+20+40 ms pass without
	// waiting, and an hour's resync would too, so the test checks that
	// the route came before the resync, not within a wall-clock bound.
	synctest.Test(t, func(t *testing.T) {
		client := fake.NewClientset(node("a", "192.168.1.1", "10.244.0.0/24"), node("b", "192.168.1.2", "10.244.1.0/24"))
		table := &flakyTable{t: newFakeTable(), fails: 4}
		c := NewController(client, table, nil, nil, nil, NewMetrics(nil), slog.New(slog.DiscardHandler),
			Options{NodeName: "a", Resync: time.Hour})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- c.Run(ctx) }()
		<-c.Ready()
		for !strings.Contains(table.String(), "10.244.1.0/24 via 192.168.1.2") {
			if time.Since(start) >= time.Hour {
				t.Fatalf("the route came back only with the resync; table:\n%s", table.String())
			}
			time.Sleep(time.Millisecond)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("the route took %v of fake time; four failures' backoff is 75 ms", took)
		}
		if c.LastSuccess().IsZero() {
			t.Error("LastSuccess is zero after a successful reconcile")
		}
		cancel()
		<-done
	})
}

// TestWithNAT: each family's exemption names its own pod subnet and only
// its own family's pod network, whatever order the podCIDRs come in, and
// a family this node has no subnet of gets none.
func TestWithNAT(t *testing.T) {
	pp := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		d       Desired
		cluster []netip.Prefix
		want    []NATOptions
	}{
		{"v6 listed first", Desired{Self: pp("fd00:1::/64", "10.244.0.0/24"), PodCIDRs: pp("10.244.0.0/24", "10.244.1.0/24", "fd00:1::/64")}, nil,
			[]NATOptions{
				{PodCIDR: netip.MustParsePrefix("10.244.0.0/24"), Cluster: pp("10.244.0.0/23"), Masquerade: true},
				{PodCIDR: netip.MustParsePrefix("fd00:1::/64"), Cluster: pp("fd00:1::/64"), Masquerade: true},
			}},
		{"v6 only", Desired{Self: pp("fd00:1::/64")}, pp("10.244.0.0/16", "fd00::/48"),
			[]NATOptions{{PodCIDR: netip.MustParsePrefix("fd00:1::/64"), Cluster: pp("fd00::/48"), Masquerade: true}}},
		{"no subnet yet", Desired{PodCIDRs: pp("10.244.1.0/24")}, nil, nil},
	} {
		got := tc.d.WithNAT(tc.cluster, true).NAT
		if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

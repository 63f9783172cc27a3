package routes

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func node(name, ip string, cidrs ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDRs: cidrs}}
	if ip != "" {
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
	}
	return n
}

// darwinRig is a macOS node's controller over recording fakes: the
// controller's informer cache is filled directly, and each reconcile is
// one Loop pass, as Run would make on an event.
type darwinRig struct {
	c     *Controller
	k     *fakeBSD
	nat   *fakeNAT
	state string
}

func newDarwinRig(t *testing.T, clusterCIDR []netip.Prefix) *darwinRig {
	r := &darwinRig{k: newFakeBSD(), nat: &fakeNAT{}, state: filepath.Join(t.TempDir(), "routes.json")}
	table, err := newBSDTable(r.k, r.state, DefaultProtocol)
	if err != nil {
		t.Fatal(err)
	}
	r.c = NewAnchorController(fake.NewClientset(), table, r.nat, nil, NewMetrics(nil), slog.New(slog.DiscardHandler),
		Options{NodeName: "mac-1", ClusterCIDRs: clusterCIDR, Masquerade: true})
	return r
}

// apply makes the cache hold exactly nodes and reconciles once.
func (r *darwinRig) apply(t *testing.T, nodes []*corev1.Node, full bool) (Outcome, error) {
	t.Helper()
	objs := make([]any, len(nodes))
	for i, n := range nodes {
		objs[i] = n
	}
	if err := r.c.informer.GetStore().Replace(objs, "1"); err != nil {
		t.Fatal(err)
	}
	return r.c.loop.reconcile(full)
}

func (r *darwinRig) String() string { return r.k.String() + r.nat.String() }

// darwinStates are Node lists a Mac node may see, in any order: nodes
// joining, leaving, moving, getting their podCIDR late.
func darwinStates() [][]*corev1.Node {
	mac := node("mac-1", "192.168.1.30", "10.244.5.0/24")
	return [][]*corev1.Node{
		{mac},
		{mac, node("lin-1", "192.168.1.11", "10.244.1.0/24")},
		{mac, node("lin-1", "192.168.1.11", "10.244.1.0/24", "fd00:244:0:1::/64"), node("lin-2", "192.168.1.12", "10.244.2.0/24")},
		{mac, node("lin-1", "192.168.1.21", "10.244.1.0/24"), node("lin-2", "192.168.1.12", "10.244.2.0/24")},
		{mac, node("lin-2", "192.168.1.12", "10.244.2.0/24"), node("lin-3", "192.168.1.13")},
		{mac, node("lin-2", "192.168.1.12", "10.244.2.0/24"), node("lin-3", "192.168.1.13", "10.244.3.0/24"), node("mac-2", "192.168.1.31", "10.244.6.0/24")},
		{node("mac-1", "192.168.1.30", "10.244.5.0/24", "fd00:244:0:5::/64"), node("lin-1", "192.168.1.11", "10.244.1.0/24", "fd00:244:0:1::/64"), node("far", "10.0.0.7", "10.244.9.0/24")},
	}
}

// TestDarwinLoopGolden is the reconcile loop of a macOS node in order:
// route(8) commands, the table, and the pf anchor after each state.
func TestDarwinLoopGolden(t *testing.T) {
	r := newDarwinRig(t, nil)
	var b strings.Builder
	for i, s := range darwinStates() {
		r.k.calls = nil
		out, err := r.apply(t, s, i == 0)
		var names []string
		for _, n := range s {
			names = append(names, fmt.Sprintf("%s%v", n.Name, n.Spec.PodCIDRs))
		}
		fmt.Fprintf(&b, "## state %d: %s\n", i, strings.Join(names, " "))
		for _, c := range r.k.calls {
			fmt.Fprintf(&b, "$ %s\n", c)
		}
		fmt.Fprintf(&b, "-> installed %d, deleted %d, unreachable %d, owned %d, err %v\n%s\n", len(out.Installed), len(out.Deleted), len(out.Unreachable), out.Owned, err, r)
	}
	golden(t, "darwin-loop.golden", b.String())
}

// TestDarwinLoopShuffled replays the states in shuffled orders, resync
// and event passes mixed: whatever the history, the table, the state file
// and the anchor end as a fresh node's would for the last state.
func TestDarwinLoopShuffled(t *testing.T) {
	states := darwinStates()
	cluster := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	for seed := range uint64(20) {
		rnd := rand.New(rand.NewPCG(seed, 7))
		r := newDarwinRig(t, cluster)
		order := rnd.Perm(len(states))
		for _, i := range order {
			if _, err := r.apply(t, states[i], rnd.IntN(2) == 0); err != nil {
				t.Fatal(err)
			}
		}
		last := states[order[len(order)-1]]
		fresh := newDarwinRig(t, cluster)
		if _, err := fresh.apply(t, last, true); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(fresh.String(), r.String()); diff != "" {
			t.Fatalf("seed %d order %v: state depends on history (-fresh +replayed):\n%s", seed, order, diff)
		}
		if diff := cmp.Diff(stateFile(t, fresh.state), stateFile(t, r.state)); diff != "" {
			t.Fatalf("seed %d order %v: route state file depends on history (-fresh +replayed):\n%s", seed, order, diff)
		}
	}
}

// recordingAnnouncer keeps what the controller last asked to announce.
type recordingAnnouncer struct{ last []netip.Prefix }

func (r *recordingAnnouncer) Announce(ps []netip.Prefix) { r.last = ps }

// TestDarwinBGP: a Mac in --cross-subnet=bgp (GoBGP runs on macOS as on
// Linux) hands its speaker its pod subnet and the VMs that moved to it,
// routes a far node's VM via the gateway toward that node (the fabric),
// and leaves the far node's pod subnet to its default route, with no
// route and no error.
func TestDarwinBGP(t *testing.T) {
	r := &darwinRig{k: newFakeBSD(), nat: &fakeNAT{}, state: filepath.Join(t.TempDir(), "routes.json")}
	table, err := newBSDTable(r.k, r.state, DefaultProtocol)
	if err != nil {
		t.Fatal(err)
	}
	ann := &recordingAnnouncer{}
	r.c = NewAnchorController(fake.NewClientset(), table, r.nat, nil, NewMetrics(nil), slog.New(slog.DiscardHandler),
		Options{NodeName: "mac-1", Masquerade: true, CrossSubnet: CrossSubnetBGP, Announcer: ann})
	r.c.SetVMs([]VM{
		{Name: "default/came-here", Node: "mac-1", Addrs: []netip.Addr{netip.MustParseAddr("10.244.1.7")}},
		{Name: "default/went-far", Node: "far", Addrs: []netip.Addr{netip.MustParseAddr("10.244.5.9")}},
	})
	states := darwinStates()
	out, err := r.apply(t, states[len(states)-1], true)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(ann.last), "[10.244.1.7/32 10.244.5.0/24 fd00:244:0:5::/64]"; got != want {
		t.Errorf("announced %s, want %s", got, want)
	}
	if len(out.ViaFabric) != 1 || out.ViaFabric[0].Dst != netip.MustParsePrefix("10.244.5.9/32") {
		t.Errorf("via the fabric: %v; outcome %+v", out.ViaFabric, out)
	}
	if len(out.Unreachable) != 1 || out.Unreachable[0].Dst != netip.MustParsePrefix("10.244.9.0/24") {
		t.Errorf("unreachable: %v, want far's pod subnet", out.Unreachable)
	}
	t.Logf("table:\n%s", r)
}

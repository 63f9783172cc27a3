package routes

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/kubernetes/fake"
)

// A VM that moved from node-a's subnet to node-b is routed by a host route
// per address to node-b on every node but node-b (whose CNI plugin routes
// it onto its bridge); a VM at home needs none.
func TestComputeVMRoutes(t *testing.T) {
	nodes := []Node{
		{Name: "node-a", PodCIDRs: pfx("10.244.1.0/24", "fd00:10:244:1::/64"), Addrs: addrs("10.99.0.11", "fd99::11")},
		{Name: "node-b", PodCIDRs: pfx("10.244.2.0/24", "fd00:10:244:2::/64"), Addrs: addrs("10.99.0.12", "fd99::12")},
		{Name: "node-c", PodCIDRs: pfx("10.244.3.0/24"), Addrs: addrs("10.99.0.13")},
	}
	vms := []VM{
		{Name: "default/moved", Addrs: addrs("10.244.1.5", "fd00:10:244:1::5"), Node: "node-b"},
		{Name: "default/home", Addrs: addrs("10.244.1.6"), Node: "node-a"},
		{Name: "default/lost", Addrs: addrs("10.244.1.7"), Node: "node-gone"},
		{Name: "default/v6less", Addrs: addrs("fd00:10:244:1::8"), Node: "node-c"},
	}
	for self, want := range map[string][]string{
		"node-a": {"10.244.1.5/32 via 10.99.0.12", "10.244.2.0/24 via 10.99.0.12", "10.244.3.0/24 via 10.99.0.13", "fd00:10:244:1::5/128 via fd99::12", "fd00:10:244:2::/64 via fd99::12"},
		"node-b": {"10.244.1.0/24 via 10.99.0.11", "10.244.3.0/24 via 10.99.0.13", "fd00:10:244:1::/64 via fd99::11"},
		"node-c": {"10.244.1.0/24 via 10.99.0.11", "10.244.1.5/32 via 10.99.0.12", "10.244.2.0/24 via 10.99.0.12", "fd00:10:244:1::/64 via fd99::11", "fd00:10:244:1::5/128 via fd99::12", "fd00:10:244:2::/64 via fd99::12"},
	} {
		d := Compute(nodes, Policy{Self: self, VMs: vms})
		var got []string
		for _, r := range d.Routes {
			got = append(got, r.String())
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: routes (-want +got):\n%s", self, diff)
		}
		var skips []string
		for _, s := range d.Skips {
			skips = append(skips, s.Reason)
		}
		all := strings.Join(skips, "\n")
		if !strings.Contains(all, "VM default/lost is on node node-gone, which is not in the cluster") {
			t.Errorf("%s: skips %q, want default/lost's", self, skips)
		}
		if self != "node-c" && !strings.Contains(all, "no IPv6 address to route VM default/v6less's fd00:10:244:1::8 via") {
			t.Errorf("%s: skips %q, want default/v6less's", self, skips)
		}
	}
}

// reconcileAsked reports (and clears) whether c's loop was asked for a
// reconcile.
func reconcileAsked(c *Controller) bool {
	select {
	case <-c.loop.trigger:
		return true
	default:
		return false
	}
}

// SetVMs has the controller reconcile only when the VMs changed: the
// claims loop calls it at every pass, on every lease file change.
func TestSetVMsTriggersOnChange(t *testing.T) {
	c := NewController(fake.NewClientset(), newFakeTable(), nil, nil, nil, NewMetrics(nil), slog.New(slog.DiscardHandler), Options{NodeName: "node-a"})
	triggered := func() bool { return reconcileAsked(c) }
	vms := []VM{{Name: "default/web", Node: "node-b", Addrs: addrs("10.244.1.5")}}
	for i, step := range []struct {
		vms  []VM
		want bool
	}{
		{vms, true},
		{vms, false},
		{[]VM{{Name: "default/web", Node: "node-c", Addrs: addrs("10.244.1.5")}}, true},
		{[]VM{{Name: "default/web", Node: "node-c", Addrs: addrs("10.244.1.5")}}, false},
		{nil, true},
	} {
		c.SetVMs(step.vms)
		if got := triggered(); got != step.want {
			t.Errorf("step %d: triggered %v, want %v", i, got, step.want)
		}
	}
}

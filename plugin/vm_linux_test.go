package plugin_test

import (
	"strings"
	"testing"
	"time"

	"github.com/vmlane/vmlane/internal/netnstest"
	"github.com/vmlane/vmlane/internal/testvm"
)

// TestVMGuestReachesGateway boots a real guest (QEMU, TCG) on the TAP the
// plugin made, with the MAC and address from the ADD result, and has it
// ping the gateway: TAP -> tc redirect -> veth -> bridge and back.
func TestVMGuestReachesGateway(t *testing.T) {
	g := testvm.Need(t, "nsenter")
	n := newNode(t, "10.250.12.0/24")
	pod := netnstest.New(t, "pod")
	list := n.conf("1.1.0", true, nil)
	rt := podRT("vm1", pod)
	r, err := n.add(list, rt)
	if err != nil {
		t.Fatal(err)
	}
	tap := r.Interfaces[len(r.Interfaces)-1] // the TAP comes last
	res, err := g.Run(t.Context(), testvm.Config{
		NetNS:   pod.Path,
		Tap:     tap.Name,
		MAC:     tap.Mac,
		IP:      r.IPs[0].Address.String(),
		Gateway: r.IPs[0].Gateway.String(),
		Timeout: 3 * time.Minute,
	})
	if err != nil {
		t.Fatalf("guest: %v", err)
	}
	if res.Net == nil || !strings.EqualFold(res.Net.MAC, tap.Mac) {
		t.Errorf("guest NIC %+v, want MAC %s", res.Net, tap.Mac)
	}
	if len(res.Pings) != 1 || !res.Pings[0].OK {
		t.Fatalf("guest could not ping the gateway %s through the TAP: %+v (errors %v)", r.IPs[0].Gateway, res.Pings, res.Errors)
	}
	// The bridge learned the guest's MAC on the host veth: the frame
	// crossed the pod netns unchanged.
	fdb := n.ns.MustRun(t, "bridge", "fdb", "show", "br", "vmlane0")
	if !strings.Contains(fdb, strings.ToLower(tap.Mac)) {
		t.Errorf("bridge never saw the guest's MAC %s:\n%s", tap.Mac, fdb)
	}
	t.Logf("guest pinged %s; ready after %s, done after %s", r.IPs[0].Gateway, res.ReadyAfter, res.DoneAfter)
	if err := n.del(list, rt); err != nil {
		t.Fatal(err)
	}
	n.assertClean(pod)
}

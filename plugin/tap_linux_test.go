package plugin_test

import (
	"strings"
	"testing"

	"github.com/vmlane/vmlane/internal/testing/netnstest"
)

// TestCNIAddOverLeftTap: a TAP left in the pod by an attachment whose veth
// is gone keeps its ingress qdisc and a redirect to nowhere, which drops
// every frame of the guest. ADD over it must attach the TAP afresh (the
// kernel refuses to replace an ingress qdisc, EINVAL), and CHECK must find
// exactly one redirect each way.
func TestCNIAddOverLeftTap(t *testing.T) {
	n := newNode(t, "10.250.9.0/24")
	pod := netnstest.New(t, "pod")
	pod.MustRun(t, "ip", "tuntap", "add", "tap0", "mode", "tap", "vnet_hdr", "one_queue")
	pod.MustRun(t, "ip", "link", "add", "gone0", "type", "veth", "peer", "name", "gone1")
	pod.MustRun(t, "tc", "qdisc", "add", "dev", "tap0", "ingress")
	pod.MustRun(t, "tc", "filter", "add", "dev", "tap0", "ingress", "prio", "1", "protocol", "all",
		"u32", "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", "gone0")
	pod.MustRun(t, "ip", "link", "del", "gone0")

	list := n.conf("1.1.0", true, nil)
	rt := podRT("c1", pod)
	if _, err := n.add(list, rt); err != nil {
		t.Fatalf("ADD over a left TAP: %v", err)
	}
	if err := n.check(list, rt); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	out := pod.MustRun(t, "tc", "filter", "show", "dev", "tap0", "ingress")
	if got := strings.Count(out, "action order"); got != 1 {
		t.Errorf("%d actions on tap0's ingress, want 1:\n%s", got, out)
	}
	if err := n.del(list, rt); err != nil {
		t.Fatal(err)
	}
	n.assertClean(pod)
}

//go:build e2e

package realnode

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vmlane/vmlane/e2e/cluster"
)

// TestHostPort: a pod's hostPort, and a VM pod's, reach the pod (the VM's
// guest) at its node's IPv4 and IPv6 addresses from another node, through
// the portmap plugin vmlaned's conflists chain; the pod's DEL takes the
// mapping with it.
func TestHostPort(t *testing.T) {
	t.Cleanup(func() {
		c.Kubectl("delete", "pod", "hostport-pod", "hostport-vm", "--ignore-not-found", "--wait=true", "--timeout=60s")
	})
	c.Apply(t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: hostport-pod, namespace: default}
spec:
  nodeName: node-a
  terminationGracePeriodSeconds: 1
  containers:
    - name: web
      image: vmlane.test/busybox:e2e
      imagePullPolicy: Never
      command: ["/bin/sh", "-c", %q]
      ports: [{containerPort: 80, hostPort: 30080}]
`, cluster.WhoamiScript))
	c.StartVMPod(t, "hostport-vm", "node-b", cluster.VMGuest{HostPort: 30081})
	c.WaitGuest(t, "hostport-vm")

	from := c.RealNode("node-c")
	get := func(url string) (string, error) {
		out, err := from.Run("", "curl", "-sS", "-g", "--max-time", "5", url)
		return strings.TrimSpace(out), err
	}
	for _, tc := range []struct{ what, url, want string }{
		{"the pod's hostPort at node-a's IPv4 address", "http://10.99.0.11:30080/cgi-bin/whoserves", "hostport-pod"},
		{"the pod's hostPort at node-a's IPv6 address", "http://[fd99::11]:30080/cgi-bin/whoserves", "hostport-pod"},
		// The guest sees node-c's own address: no NAT but the DNAT.
		{"the VM's hostPort at node-b's IPv4 address", "http://10.99.0.12:30081/cgi-bin/whoami", "10.99.0.13"},
		{"the VM's hostPort at node-b's IPv6 address", "http://[fd99::12]:30081/cgi-bin/whoami", "fd99::13"},
	} {
		cluster.WaitFor(t, time.Minute, "node-c reaches "+tc.what, func() (bool, string) {
			out, err := get(tc.url)
			return err == nil && strings.Contains(out, tc.want), out
		})
	}

	// The pod goes: its node's port answers no more.
	c.MustKubectl(t, "delete", "pod", "hostport-pod", "--wait=true", "--timeout=60s")
	cluster.WaitFor(t, 30*time.Second, "node-a's hostPort 30080 gone with its pod", func() (bool, string) {
		out, err := get("http://10.99.0.11:30080/cgi-bin/whoserves")
		return err != nil, out
	})
	if rules, _ := c.RealNode("node-a").Run("", "iptables", "-t", "nat", "-S"); strings.Contains(rules, "30080") {
		t.Errorf("node-a's nat rules still map 30080 after the pod's DEL:\n%s", rules)
	}
}

//go:build e2e

package realnode

import (
	"strings"
	"testing"
	"time"

	"github.com/vmlane/vmlane/e2e/cluster"
)

// TestAPIServerReachesPods: the API server's proxy to a pod, and to a VM
// pod's guest, answers (kubectl get --raw …/pods/NAME:80/proxy/…): the
// control plane's host, which is no node, runs vmlaned --routes-only and
// routes every node's pod subnets. The [sig-network] Proxy conformance
// tests, and webhooks and aggregated APIs that pods serve, need it.
func TestAPIServerReachesPods(t *testing.T) {
	pod := web["node-b"][0]
	cluster.WaitFor(t, time.Minute, "the API server's proxy to pod "+pod.Name, func() (bool, string) {
		out, err := c.Kubectl("get", "--raw", "/api/v1/namespaces/default/pods/"+pod.Name+":80/proxy/cgi-bin/whoserves")
		return err == nil && strings.Contains(out, pod.Name), out
	})
	cluster.WaitFor(t, time.Minute, "the API server's proxy to VM pod vm-a's guest", func() (bool, string) {
		out, err := c.Kubectl("get", "--raw", "/api/v1/namespaces/default/pods/vm-a:80/proxy/cgi-bin/whoami")
		// The guest sees the API server's own address: routed, not NATed.
		return err == nil && strings.Contains(out, cluster.APIServerIP.String()), out
	})
}

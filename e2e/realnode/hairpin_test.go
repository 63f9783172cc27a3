//go:build e2e

package realnode

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmlane/vmlane/e2e/cluster"
)

// selfService makes a Service named name that selects the pods labelled
// hairpin=name, and returns its ClusterIP; it goes when the test ends.
func selfService(t *testing.T, name string) string {
	t.Helper()
	c.Apply(t, `apiVersion: v1
kind: Service
metadata: {name: `+name+`, namespace: default}
spec:
  selector: {hairpin: `+name+`}
  ports: [{port: 80, targetPort: 80}]
`)
	t.Cleanup(func() { c.Kubectl("delete", "service", name, "--ignore-not-found") })
	svc, err := c.Client.CoreV1().Services("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return svc.Spec.ClusterIP
}

// TestPodReachesItselfThroughItsService: a pod that dials the ClusterIP of
// a Service whose only endpoint it is gets its own answer. kube-proxy's
// DNAT sends the packet back out the bridge port it came in on (the nodes
// run br_netfilter, as kube-proxy wants), which the bridge drops unless the
// port has hairpin on: the Networking Granular Checks' endpoint-Service
// tests failed on this.
func TestPodReachesItselfThroughItsService(t *testing.T) {
	src := web["node-a"][0]
	ip := selfService(t, "hairpin-pod")
	c.MustKubectl(t, "label", "pod", src.Name, "hairpin=hairpin-pod")
	t.Cleanup(func() { c.Kubectl("label", "pod", src.Name, "hairpin-") })
	var out string
	cluster.WaitFor(t, time.Minute, src.Name+" served by itself through Service hairpin-pod ("+ip+")", func() (bool, string) {
		var err error
		out, err = c.Exec(src, "timeout", "5", "wget", "-q", "-O", "-", "http://"+ip+"/cgi-bin/whoserves")
		_, backend, _ := strings.Cut(strings.TrimSpace(out), " ")
		return err == nil && backend == src.Name, out
	})
}

// TestVMReachesItselfThroughItsService: the same for a VM's guest, which
// fetches its own Service's ClusterIP once it has its address.
func TestVMReachesItselfThroughItsService(t *testing.T) {
	ip := selfService(t, "hairpin-vm")
	url := "http://" + ip + "/cgi-bin/whoami"
	t.Cleanup(func() { c.Kubectl("delete", "pod", "hairpin-vm", "--ignore-not-found", "--wait=true", "--timeout=60s") })
	c.StartVMPod(t, "hairpin-vm", "node-b", cluster.VMGuest{Label: "hairpin: hairpin-vm", Fetch: []string{url}})
	c.WaitGuest(t, "hairpin-vm")
	cluster.WaitFor(t, 2*time.Minute, "hairpin-vm's guest served by itself through Service hairpin-vm ("+ip+")", func() (bool, string) {
		r, err := c.GuestReport("hairpin-vm")
		if err != nil {
			return false, err.Error()
		}
		for _, f := range r.Fetches {
			if f.URL == url {
				return f.OK, f.Body
			}
		}
		return false, "no fetch reported yet"
	})
}

//go:build e2e

package realnode

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmlane/vmlane/e2e/cluster"
)

// TestHelmTakesOver: the Helm chart takes over the running install that
// `kubectl apply -k` made (the documented adoption: each object labelled
// and annotated as the release's), with the values a user of this cluster
// gives (its image, the cluster DNS, its cluster CIDRs), and rolls the
// DaemonSet while VMs are pinged every 200 ms (underTraffic): no ping
// lost, no route withdrawn, routes and leases as they were. Every test
// after this one (the file order: the host ports, live migration, plain
// and VM pods, a VM's restart and moves) runs on the chart's install.
func TestHelmTakesOver(t *testing.T) {
	helm := os.Getenv("VMLANE_HELM")
	if helm == "" {
		t.Fatal("VMLANE_HELM is not set: make helm builds helm (make test and make e2e-real set it)")
	}
	chart, err := filepath.Abs("../../charts/vmlane")
	if err != nil {
		t.Fatal(err)
	}
	// Adoption: Helm takes over objects that carry its label and the
	// release's annotations, and refuses any other that it would make.
	for _, obj := range []string{"serviceaccount/vmlane", "daemonset/vmlane", "secret/vmlane-peer"} {
		c.MustKubectl(t, "-n", "vmlane-system", "label", "--overwrite", obj, "app.kubernetes.io/managed-by=Helm")
		c.MustKubectl(t, "-n", "vmlane-system", "annotate", "--overwrite", obj, "meta.helm.sh/release-name=vmlane", "meta.helm.sh/release-namespace=vmlane-system")
	}
	for _, obj := range []string{"clusterrole/vmlane", "clusterrolebinding/vmlane", "validatingadmissionpolicy/vmlane-vmclaims", "validatingadmissionpolicybinding/vmlane-vmclaims"} {
		c.MustKubectl(t, "label", "--overwrite", obj, "app.kubernetes.io/managed-by=Helm")
		c.MustKubectl(t, "annotate", "--overwrite", obj, "meta.helm.sh/release-name=vmlane", "meta.helm.sh/release-namespace=vmlane-system")
	}

	underTraffic(t, "helm's takeover", func() {
		// --force-conflicts: Helm 4 applies server-side, and the fields
		// it takes over are kubectl's (kubectl apply --server-side).
		cmd := exec.Command("ip", "netns", "exec", c.CP.NetNS, helm, "upgrade", "--install", "vmlane", chart,
			"--kubeconfig", c.CP.Kubeconfig, "--namespace", "vmlane-system", "--force-conflicts",
			// What e2e/overlay patches in: the image make image built,
			// never pulled, and the cluster DNS for VMs.
			"--set", "image.tag=e2e,image.pullPolicy=Never",
			"--set", "dns.servers={10.96.0.10},dns.search={default.svc.cluster.local,svc.cluster.local,cluster.local}",
			// And what a user of this cluster sets (the controller
			// manager's --cluster-cidr): it changes the pod template, so
			// the DaemonSet rolls.
			"--set", "clusterCIDRs={"+cluster.DefaultClusterCIDR.String()+","+cluster.DefaultClusterCIDR6.String()+"}")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("helm upgrade --install: %v\n%s", err, out)
		}
	})
	args := c.MustKubectl(t, "-n", "vmlane-system", "get", "ds/vmlane", "-o", "jsonpath={.spec.template.spec.containers[0].args}")
	if !strings.Contains(args, "--cluster-cidr=10.244.0.0/16,fd00:10:244::/56") || !strings.Contains(args, "--dns=10.96.0.10") {
		t.Errorf("the DaemonSet's args after the takeover: %s", args)
	}
	if out := c.MustKubectl(t, "-n", "vmlane-system", "get", "ds/vmlane", "-o", "jsonpath={.metadata.annotations.meta\\.helm\\.sh/release-name}"); out != "vmlane" {
		t.Errorf("ds/vmlane is not the release's: %q", out)
	}
}

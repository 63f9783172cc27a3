//go:build e2e

package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestManifestsApply validates the kustomize base against the real API
// server's schemas: a server-side dry run, which fails on an unknown field
// or a bad value. (Setup has applied it for real already; the dry run
// shows that applying it again is clean.)
func TestManifestsApply(t *testing.T) {
	out, err := c.Kubectl("apply", "--server-side", "--dry-run=server", "-k", c.Opts.Manifests)
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"namespace/", "customresourcedefinition.apiextensions.k8s.io/vmclaims.vmlane.io", "serviceaccount/", "clusterrole.rbac.authorization.k8s.io/", "clusterrolebinding.rbac.authorization.k8s.io/", "daemonset.apps/"} {
		if !strings.Contains(out, kind) {
			t.Errorf("kubectl apply -k did not apply a %s:\n%s", strings.TrimSuffix(kind, "/"), out)
		}
	}
	// The cross-subnet examples patch the same DaemonSet.
	for _, overlay := range []string{"bgp", "vxlan"} {
		out, err := c.Kubectl("apply", "--server-side", "--dry-run=server", "-k", filepath.Join(c.Opts.Manifests, overlay))
		if err != nil || !strings.Contains(out, "daemonset.apps/vmlane") {
			t.Errorf("manifests/%s: %v\n%s", overlay, err, out)
		}
	}
}

// TestRBACIsExactlyWhatVmlanedNeeds: every vmlaned in the suite runs with
// the manifests' ServiceAccount token, so the scenarios passing shows the
// ClusterRole is enough (every node has set its NetworkUnavailable
// condition, a nodes/status patch). Here the API server is asked what that
// token may do: nodes get/list/watch, nodes/status patch, events create
// and patch (client-go's recorder patches a repeated Event), VMClaims
// list, watch, create, update and delete, nothing more.
func TestRBACIsExactlyWhatVmlanedNeeds(t *testing.T) {
	nodes, err := c.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		ok := false
		for _, cond := range n.Status.Conditions {
			ok = ok || cond.Type == corev1.NodeNetworkUnavailable && cond.Status == corev1.ConditionFalse
		}
		if !ok {
			t.Errorf("node %s: NetworkUnavailable is not False: vmlaned could not patch nodes/status: %+v", n.Name, n.Status.Conditions)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "nodes"}, "yes"},
		{[]string{"list", "nodes"}, "yes"},
		{[]string{"watch", "nodes"}, "yes"},
		{[]string{"patch", "nodes", "--subresource=status"}, "yes"},
		{[]string{"create", "events"}, "yes"},
		// client-go's event recorder patches an Event that repeats.
		{[]string{"patch", "events"}, "yes"},
		{[]string{"update", "events"}, "no"},
		{[]string{"update", "nodes"}, "no"},
		{[]string{"patch", "nodes"}, "no"},
		{[]string{"delete", "nodes"}, "no"},
		{[]string{"get", "pods"}, "no"},
		{[]string{"get", "secrets", "-A"}, "no"},
		{[]string{"create", "serviceaccounts/token", "-n", "vmlane-system"}, "no"},
		// VMClaims: listed, watched, created, updated, deleted; never
		// got one by one, or patched.
		{[]string{"list", "vmclaims.vmlane.io", "-A"}, "yes"},
		{[]string{"create", "vmclaims.vmlane.io", "-n", "default"}, "yes"},
		{[]string{"update", "vmclaims.vmlane.io", "-n", "default"}, "yes"},
		{[]string{"delete", "vmclaims.vmlane.io", "-n", "default"}, "yes"},
		{[]string{"watch", "vmclaims.vmlane.io", "-A"}, "yes"},
		{[]string{"get", "vmclaims.vmlane.io", "-n", "default"}, "no"},
		{[]string{"patch", "vmclaims.vmlane.io", "-n", "default"}, "no"},
	} {
		args := append([]string{"auth", "can-i"}, tc.args...)
		out, _ := c.KubectlWith(c.NodeKubeconfig, args...) // "no" exits 1
		// The answer is the last line; kubectl may warn above it.
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if got := strings.TrimSpace(lines[len(lines)-1]); got != tc.want {
			t.Errorf("vmlaned's token: can-i %s = %q, want %s", strings.Join(tc.args, " "), out, tc.want)
		}
	}
}

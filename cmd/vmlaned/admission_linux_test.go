package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/vmlane/vmlane/internal/testing/controlplane"
	"github.com/vmlane/vmlane/internal/testing/privtest"
)

// manifestResources maps the kinds of vmlane's manifests to their API
// resources, for applyManifest.
var manifestResources = map[string]schema.GroupVersionResource{
	"CustomResourceDefinition":         {Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"},
	"ValidatingAdmissionPolicy":        {Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"},
	"ValidatingAdmissionPolicyBinding": {Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"},
	"ClusterRole":                      {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	"ClusterRoleBinding":               {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	"Namespace":                        {Version: "v1", Resource: "namespaces"},
	"ServiceAccount":                   {Version: "v1", Resource: "serviceaccounts"},
}

// applyManifest creates every object of a manifest of manifests/base (one
// or more YAML documents) as kubectl apply would on an empty cluster,
// namespaced objects in vmlane-system.
func applyManifest(tb testing.TB, dyn dynamic.Interface, file string) {
	tb.Helper()
	raw, err := os.ReadFile("../../manifests/base/" + file)
	if err != nil {
		tb.Fatal(err)
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return
		} else if err != nil {
			tb.Fatalf("%s: %v", file, err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		gvr, ok := manifestResources[obj.GetKind()]
		if !ok {
			tb.Fatalf("%s: kind %s has no resource in manifestResources", file, obj.GetKind())
		}
		var r dynamic.ResourceInterface = dyn.Resource(gvr)
		if obj.GetKind() == "ServiceAccount" {
			r = dyn.Resource(gvr).Namespace("vmlane-system")
		}
		if _, err := r.Create(context.Background(), obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			tb.Fatalf("%s: creating %s %s: %v", file, obj.GetKind(), obj.GetName(), err)
		}
	}
}

// TestVMClaimsAdmission: against a real kube-apiserver (with
// kube-controller-manager, for its garbage collector) and vmlane's
// manifests, a vmlaned writes only the claims of its own node, by the node
// its pod-bound token names: node-a's token cannot create a claim naming
// node-b, nor one whose home is node-b, nor delete node-b's; node-b's token
// takes node-a's claim (a migration target does) but changes neither its
// home nor its addresses; a token bound to no pod writes nothing; the
// cluster's admin is not held by the policy. A claim owned by a Node goes
// when the Node does.
func TestVMClaimsAdmission(t *testing.T) {
	privtest.Require(t, "ip")
	if _, err := controlplane.Find(); err != nil {
		privtest.Missing(t, err.Error())
	}
	cp := controlplane.Start(t, controlplane.Options{ClusterCIDR: netip.MustParsePrefix("10.244.0.0/16")})
	cc := cp.Client()
	admin := &rest.Config{Host: cc.Host, BearerToken: cc.BearerToken, TLSClientConfig: rest.TLSClientConfig{CAData: cc.CAData}, Dial: cc.Dial}
	kc := kubernetes.NewForConfigOrDie(admin)
	dyn := dynamic.NewForConfigOrDie(admin)
	ctx := t.Context()
	for _, f := range []string{"namespace.yaml", "serviceaccount.yaml", "vmclaims.yaml", "clusterrole.yaml", "clusterrolebinding.yaml", "vmclaims-policy.yaml"} {
		applyManifest(t, dyn, f)
	}

	// Two nodes, and on each a pod of vmlaned's ServiceAccount (no
	// kubelet runs it: the token is bound to the pod and its node).
	nodes := map[string]*corev1.Node{}
	tokens := map[string]string{}
	for _, name := range []string{"node-a", "node-b"} {
		n, err := kc.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nodes[name] = n
		pod, err := kc.CoreV1().Pods("vmlane-system").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "vmlane-" + name},
			Spec: corev1.PodSpec{NodeName: name, ServiceAccountName: "vmlane",
				Containers: []corev1.Container{{Name: "vmlaned", Image: "vmlane.invalid/vmlane"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := kc.CoreV1().ServiceAccounts("vmlane-system").CreateToken(ctx, "vmlane", &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{
			BoundObjectRef: &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tokens[name] = tr.Status.Token
	}
	unbound, err := kc.CoreV1().ServiceAccounts("vmlane-system").CreateToken(ctx, "vmlane", &authv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokens["unbound"] = unbound.Status.Token
	as := func(who string) dynamic.NamespaceableResourceInterface {
		if who == "admin" {
			return dyn.Resource(vmClaimGVR)
		}
		c := rest.CopyConfig(admin)
		c.BearerToken = tokens[who]
		return dynamic.NewForConfigOrDie(c).Resource(vmClaimGVR)
	}
	status := func(node, home, ipv4 string) claimStatus {
		return claimStatus{IPv4: ipv4, MAC: "02:76:0a:f4:01:05", Node: node, Pod: "default/web-1", Home: home}
	}
	rv := func(vm string) string {
		o, err := dyn.Resource(vmClaimGVR).Namespace("default").Get(ctx, vm, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return o.GetResourceVersion()
	}

	// The policy takes effect once the API server has loaded it: until
	// node-a's forbidden create is refused.
	deadline := time.Now().Add(time.Minute)
	for {
		err := applyClaim(ctx, as("node-a"), claimAction{Op: "create", VM: "default/probe", Status: status("node-b", "node-b", "10.244.1.9/24")}, "")
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			break
		}
		if err == nil {
			_ = dyn.Resource(vmClaimGVR).Namespace("default").Delete(ctx, "probe", metav1.DeleteOptions{})
		}
		if time.Now().After(deadline) {
			t.Fatalf("the admission policy did not refuse node-a's claim naming node-b within a minute: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	for _, step := range []struct {
		name, who string
		act       func() claimAction
		refused   string // a word of the refusal; "" is allowed
	}{
		{"node-a creates its own claim", "node-a", func() claimAction {
			return claimAction{Op: "create", VM: "default/web", Status: status("node-a", "node-a", "10.244.1.5/24")}
		}, ""},
		{"node-a creates a claim naming node-b", "node-a", func() claimAction {
			return claimAction{Op: "create", VM: "default/x", Status: status("node-b", "node-b", "10.244.2.5/24")}
		}, "status.node is node-a"},
		{"node-a creates a claim whose home is node-b", "node-a", func() claimAction {
			return claimAction{Op: "create", VM: "default/y", Status: status("node-a", "node-b", "10.244.2.6/24")}
		}, "status.home is node-a"},
		{"a token bound to no pod creates a claim", "unbound", func() claimAction {
			return claimAction{Op: "create", VM: "default/z", Status: status("node-a", "node-a", "10.244.1.7/24")}
		}, "not bound to a pod"},
		{"node-b takes node-a's claim (a migration's target)", "node-b", func() claimAction {
			return claimAction{Op: "update", VM: "default/web", Status: status("node-b", "node-a", "10.244.1.5/24"), ResourceVersion: rv("web")}
		}, ""},
		{"node-a deletes node-b's claim", "node-a", func() claimAction {
			return claimAction{Op: "delete", VM: "default/web", ResourceVersion: rv("web")}
		}, "status.node is node-a"},
		{"node-b changes the claim's home", "node-b", func() claimAction {
			return claimAction{Op: "update", VM: "default/web", Status: status("node-b", "node-b", "10.244.1.5/24"), ResourceVersion: rv("web")}
		}, "status.home never changes"},
		{"node-b changes the claim's address", "node-b", func() claimAction {
			return claimAction{Op: "update", VM: "default/web", Status: status("node-b", "node-a", "10.244.1.99/24"), ResourceVersion: rv("web")}
		}, "status.ipv4 and status.mac never change"},
		{"node-a takes it back", "node-a", func() claimAction {
			return claimAction{Op: "update", VM: "default/web", Status: status("node-a", "node-a", "10.244.1.5/24"), ResourceVersion: rv("web")}
		}, ""},
		{"node-a deletes its claim", "node-a", func() claimAction {
			return claimAction{Op: "delete", VM: "default/web", ResourceVersion: rv("web")}
		}, ""},
		{"the admin writes any claim", "admin", func() claimAction {
			return claimAction{Op: "create", VM: "default/admin", Status: status("node-b", "node-a", "10.244.1.8/24")}
		}, ""},
	} {
		err := applyClaim(ctx, as(step.who), step.act(), "")
		switch {
		case step.refused == "" && err != nil:
			t.Errorf("%s: %v, want it allowed", step.name, err)
		case step.refused != "" && (err == nil || !strings.Contains(err.Error(), step.refused)):
			t.Errorf("%s: %v, want it refused (%q)", step.name, err, step.refused)
		default:
			t.Logf("%s: %v", step.name, err)
		}
	}

	// A claim owned by node-b (as vmlaned writes them) goes with node-b.
	if err := applyClaim(ctx, as("node-b"), claimAction{Op: "create", VM: "default/gc", Status: status("node-b", "node-b", "10.244.2.5/24")}, nodes["node-b"].UID); err != nil {
		t.Fatal(err)
	}
	o, err := dyn.Resource(vmClaimGVR).Namespace("default").Get(ctx, "gc", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if refs := o.GetOwnerReferences(); len(refs) != 1 || refs[0].Kind != "Node" || refs[0].UID != types.UID(nodes["node-b"].UID) {
		t.Fatalf("owner references %+v, want node-b's Node", refs)
	}
	if err := kc.CoreV1().Nodes().Delete(ctx, "node-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		_, err := dyn.Resource(vmClaimGVR).Namespace("default").Get(ctx, "gc", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node-b's claim a minute after its Node was deleted: %v", err)
		}
	}
}

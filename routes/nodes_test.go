package routes

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSameForRoutes: a kubelet heartbeat (a new resourceVersion and
// status fields Slim drops) is no change; anything Compute reads is.
func TestSameForRoutes(t *testing.T) {
	base := func() *corev1.Node {
		n := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "u1", ResourceVersion: "1", Annotations: map[string]string{"ip": "10.0.0.9"}},
			Spec:       corev1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24"}},
		}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		n.Labels = map[string]string{"kubernetes.io/os": "linux", "kubernetes.io/hostname": "a"}
		return n
	}
	slim := func(n *corev1.Node) *corev1.Node {
		s, _ := Slim("ip")(n)
		return s.(*corev1.Node)
	}
	for _, tc := range []struct {
		name   string
		change func(n *corev1.Node)
		same   bool
	}{
		{"heartbeat", func(n *corev1.Node) {
			n.ResourceVersion = "2"
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
			n.Status.Images = []corev1.ContainerImage{{Names: []string{"x"}}}
		}, true},
		{"network condition", func(n *corev1.Node) {
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse})
		}, true},
		{"another label", func(n *corev1.Node) { n.Labels["topology.kubernetes.io/zone"] = "z1" }, true},
		{"VM node label", func(n *corev1.Node) { n.Labels[VMNodeLabel] = "true" }, false},
		{"OS label", func(n *corev1.Node) { n.Labels["kubernetes.io/os"] = "darwin" }, false},
		{"not ready", func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionUnknown }, false},
		{"podCIDR", func(n *corev1.Node) { n.Spec.PodCIDRs = []string{"10.244.2.0/24"} }, false},
		{"address", func(n *corev1.Node) { n.Status.Addresses[0].Address = "10.0.0.2" }, false},
		{"annotation", func(n *corev1.Node) { n.Annotations["ip"] = "10.0.0.8" }, false},
		{"re-created", func(n *corev1.Node) { n.UID = "u2" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := base()
			tc.change(b)
			if got := SameForRoutes(slim(base()), slim(b)); got != tc.same {
				t.Errorf("SameForRoutes = %v, want %v", got, tc.same)
			}
		})
	}
}

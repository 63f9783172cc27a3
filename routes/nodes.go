package routes

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// VMNodeLabel, set to "true" on a Node, marks it as a VM node: a node
// whose pod subnet vmlane serves. In a hybrid cluster the other nodes run
// their own CNI and a routes-only vmlaned, which routes to VM nodes only.
const VMNodeLabel = "vmlane.io/vm-node"

// osLabel is the kubelet's label of the node's operating system.
const osLabel = "kubernetes.io/os"

// IsVMNode reports whether n carries VMNodeLabel=true.
func IsVMNode(n *corev1.Node) bool { return n.Labels[VMNodeLabel] == "true" }

// FromNode extracts what the controller needs from a Node. Fields that do
// not parse are recorded in Problems, never fatal: one bad Node must not
// stop routing to the others.
func FromNode(n *corev1.Node, ipAnnotation string) Node {
	out := Node{Name: n.Name, VM: IsVMNode(n), Linux: n.Labels[osLabel] == "linux", Ready: conditionTrue(n, corev1.NodeReady),
		Created: n.CreationTimestamp.Time}
	if v, ok := n.Labels[VMNodeLabel]; ok && v != "true" {
		out.Problems = append(out.Problems, fmt.Sprintf("label %s=%q is not \"true\": the node is not a VM node", VMNodeLabel, v))
	}
	cidrs := n.Spec.PodCIDRs
	if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
		cidrs = []string{n.Spec.PodCIDR}
	}
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			out.Problems = append(out.Problems, fmt.Sprintf("podCIDR %q does not parse", c))
			continue
		}
		out.PodCIDRs = append(out.PodCIDRs, p.Masked())
	}
	if ipAnnotation != "" {
		if v, ok := n.Annotations[ipAnnotation]; ok {
			if a, err := netip.ParseAddr(v); err == nil {
				out.Addrs = append(out.Addrs, a.Unmap())
			} else {
				out.Problems = append(out.Problems, fmt.Sprintf("annotation %s=%q is not an IP address", ipAnnotation, v))
			}
		}
	}
	for _, want := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP} {
		for _, a := range n.Status.Addresses {
			if a.Type != want {
				continue
			}
			ip, err := netip.ParseAddr(a.Address)
			if err != nil {
				out.Problems = append(out.Problems, fmt.Sprintf("%s %q is not an IP address", a.Type, a.Address))
				continue
			}
			out.Addrs = append(out.Addrs, ip.Unmap())
		}
	}
	return out
}

// Slim is the informer's transform: it keeps only what FromNode reads (name,
// creation time, podCIDRs, addresses, the one annotation, the VM-node and
// OS labels, the Ready and NetworkUnavailable conditions' status), so 5,000
// Nodes with their images, condition timestamps and managed fields do not
// sit in the daemon's memory.
func Slim(ipAnnotation string) func(any) (any, error) {
	return func(obj any) (any, error) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return obj, nil // DeletedFinalStateUnknown and the like
		}
		s := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:              n.Name,
				UID:               n.UID,
				ResourceVersion:   n.ResourceVersion,
				CreationTimestamp: n.CreationTimestamp,
			},
			Spec: corev1.NodeSpec{PodCIDR: n.Spec.PodCIDR, PodCIDRs: n.Spec.PodCIDRs},
		}
		if v, ok := n.Annotations[ipAnnotation]; ok && ipAnnotation != "" {
			s.Annotations = map[string]string{ipAnnotation: v}
		}
		for _, l := range []string{VMNodeLabel, osLabel} {
			if v, ok := n.Labels[l]; ok {
				if s.Labels == nil {
					s.Labels = map[string]string{}
				}
				s.Labels[l] = v
			}
		}
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP {
				s.Status.Addresses = append(s.Status.Addresses, a)
			}
		}
		// NetworkUnavailable's and Ready's status only (no timestamps,
		// which would turn every heartbeat into an update): vmlaned keeps
		// its own node's NetworkUnavailable at False (see
		// [NetworkAvailable]), and a Service gateway must be Ready.
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeNetworkUnavailable || c.Type == corev1.NodeReady {
				s.Status.Conditions = append(s.Status.Conditions, corev1.NodeCondition{Type: c.Type, Status: c.Status})
			}
		}
		return s, nil
	}
}

// NetworkAvailable reports whether n's NetworkUnavailable condition is
// False: the network plugin has said the node's network is up. A node
// created anew (deleted and registered again) has no such condition, or a
// cloud controller's True, until the plugin sets it.
func NetworkAvailable(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeNetworkUnavailable {
			return c.Status == corev1.ConditionFalse
		}
	}
	return false
}

// conditionTrue reports whether n's condition t has status True.
func conditionTrue(n *corev1.Node, t corev1.NodeConditionType) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// SameForRoutes reports whether two versions of a Node ask for the same
// routes and rules: the same object (UID), podCIDRs, addresses, next-hop
// annotations, VM-node and OS labels, and readiness (a Service gateway
// must be Ready). Its NetworkUnavailable condition is left out: only the
// node's own daemon reads it, from the lister, on its own timer.
func SameForRoutes(a, b *corev1.Node) bool {
	return a.UID == b.UID && a.Spec.PodCIDR == b.Spec.PodCIDR &&
		slices.Equal(a.Spec.PodCIDRs, b.Spec.PodCIDRs) &&
		maps.Equal(a.Annotations, b.Annotations) &&
		a.Labels[VMNodeLabel] == b.Labels[VMNodeLabel] && a.Labels[osLabel] == b.Labels[osLabel] &&
		conditionTrue(a, corev1.NodeReady) == conditionTrue(b, corev1.NodeReady) &&
		slices.Equal(a.Status.Addresses, b.Status.Addresses)
}

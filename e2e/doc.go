// Package e2e is vmlane's end-to-end suite (build tag e2e): a three-node
// cluster on this one machine (package e2e/cluster) with a real
// kube-apiserver, vmlaned on every node running with the manifests' RBAC,
// VM pods whose QEMU guests get their addresses by DHCP, and the scenarios
// a user meets: VMs reaching each other across nodes without NAT, a plain
// pod reaching VMs, masquerade to the outside, a node deleted and re-added,
// vmlaned killed and restarted under traffic, and a deleted pod's address
// reused last. `make test` runs it as root:
//
//	go test -tags e2e -count=1 ./e2e/
//
// with VMLANE_BIN_DIR, VMLANE_GUEST_DIR and VMLANE_CONTROLPLANE_DIR set.
package e2e

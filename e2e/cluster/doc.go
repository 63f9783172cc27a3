// Package cluster builds a whole vmlane cluster on one Linux machine, out
// of network namespaces: a test switch (a bridge in its own namespace), a
// real etcd and kube-apiserver on it (internal/testing/controlplane), an "outside"
// host standing for the world beyond the pod network, and nodes, each a
// namespace on the switch running vmlaned with its own --node-name and the
// ServiceAccount token of the manifests' RBAC. Pods are made the way a
// runtime makes them: a pod netns, CNI ADD through libcni with the conflist
// vmlaned wrote, and for a VM pod a QEMU guest (internal/testing/testvm) on the TAP
// that configures itself by DHCP.
//
// The e2e suite (package e2e, build tag e2e) and `make demo` (e2e/demo)
// use it. Everything it makes is registered with the testing.TB it is
// given, so it is removed when the test ends, or, for the demo, when the
// [Runner] is closed; processes also die with the process that started
// them (Pdeathsig), and namespaces left by a killed run are swept by the
// next one (internal/testing/netnstest).
package cluster

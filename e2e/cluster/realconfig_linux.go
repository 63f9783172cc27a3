package cluster

import (
	"fmt"
	"net/netip"
)

// VMRuntimeClass is the RuntimeClass (and the containerd runtime handler
// of the same name) that runs VM pods: runc, like the default, but its
// pods get their network from the VM conflist, which vmlaned writes into
// VMConfDir. docs/runtimes.md documents the same containerd settings.
const (
	VMRuntimeClass = "vmlane-vm"
	VMConfDir      = "/etc/cni/vmlane-vm.d"
)

// PauseImage is the sandbox image the nodes pin (an image of our own,
// built by `make image`, under the name containerd looks for).
const PauseImage = "registry.k8s.io/pause:3.10"

// containerdConfig is the node's /etc/containerd/config.toml. The
// defaults are kept wherever they work; what is set is set for a reason:
//   - restrict_oom_score_adj: this machine lacks CAP_SYS_RESOURCE, and
//     runc fails to lower a container's oom_score_adj without it;
//   - the pinned sandbox image, so that image GC never removes the one
//     imported (there is no registry to pull it from again);
//   - the vmlane-vm runtime handler with its own CNI folder (containerd
//     1.7 and later; containerd 1.6 nodes run plain pods only).
func containerdConfig(rt Runtime) string {
	if rt == Containerd16 {
		return fmt.Sprintf(`version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
    max_conf_num = 1
`, PauseImage)
	}
	return fmt.Sprintf(`version = 3
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %q
[plugins.'io.containerd.cri.v1.runtime']
  enable_cdi = false
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.%s]
      runtime_type = 'io.containerd.runc.v2'
      cni_conf_dir = %q
      cni_max_conf_num = 1
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['/opt/cni/bin']
    conf_dir = '/etc/cni/net.d'
    max_conf_num = 1
[plugins.'io.containerd.nri.v1.nri']
  disable = true
`, PauseImage, VMRuntimeClass, VMConfDir)
}

// kubeletConfig is the node's KubeletConfiguration. Besides the paths:
//   - cgroup v1 and cgroupfs, with the pods under the node's own cgroup;
//   - no eviction, image GC or allocatable enforcement: three nodes share
//     one small machine's disk and memory;
//   - anonymous, always-allowed access to the kubelet API, which only
//     the test's apiserver reaches (for kubectl logs and exec);
//   - the cluster DNS (ClusterDNS), which pods get in their resolv.conf
//     whether or not the cluster runs it (Options.CoreDNSDir).
func kubeletConfig(ip netip.Addr, cgroupRoot string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: %s
failCgroupV1: false
failSwapOn: false
address: %s
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
evictionHard: {memory.available: "1Mi", nodefs.available: "0%%", imagefs.available: "0%%", nodefs.inodesFree: "0%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
enforceNodeAllocatable: []
localStorageCapacityIsolation: false
maxPods: 30
serializeImagePulls: false
clusterDNS: [%s]
clusterDomain: %s
`, cgroupRoot, ip, ClusterDNS, ClusterDomain)
}

// kubeProxyConfig is kube-proxy's configuration: iptables mode, the
// cluster's pod network (traffic from outside it to a Service is
// masqueraded, pod to Service to pod is not), and conntrack left as the
// namespace has it (the host's limits are not the test's to change).
func kubeProxyConfig(node, clusterCIDR string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: /var/lib/kubelet/kubeconfig
hostnameOverride: %s
mode: iptables
clusterCIDR: %s
bindAddress: 0.0.0.0
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, node, clusterCIDR)
}

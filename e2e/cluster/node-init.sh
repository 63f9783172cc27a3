#!/bin/sh
# node-init.sh: the first process of an e2e real node (see realnode_linux.go).
#
# It runs in the node's network namespace and in a private mount namespace
# of its own:
#
#   nsenter --net=NETNS -- unshare --mount --propagation private -- sh node-init.sh
#
# and makes that mount namespace look like a node's own disk: /etc, /opt,
# /var/lib and /var/log are overlays on the host's (writes land in the
# node's folder), /run and /var/lib/containerd are folders of the node's,
# and /sys is a sysfs of the node's network namespace. Then containerd,
# the kubelet and kube-proxy run with their default paths, so hostPath
# volumes, /etc/cni/net.d and /opt/cni/bin are this node's, as on a real
# node, and nothing is written to the host's.
#
# Everything comes from the environment (all set by realnode_linux.go):
#   NODE_DIR        the node's folder on the host
#   NODE_IP         the kubelet's --node-ip: IPv4, or IPv4,IPv6
#   NODE_CGROUP     the v1 cgroup (relative path) this script joins first,
#                   so that the daemons and every shim they start are found
#                   there at teardown
#   RUNTIME_BIN     folder with containerd, ctr and containerd-shim-runc-v2
#   CNI_BIN         folder with the loopback CNI plugin
#   KUBELET, KUBE_PROXY  the binaries
#   IMAGES          image tarballs to import, space-separated
set -eu

log() { echo "node-init: $*" >&2; }

# 1. The daemons' cgroup, before anything else is started.
for h in /sys/fs/cgroup/*; do
	[ -d "$h/$NODE_CGROUP" ] && echo $$ >"$h/$NODE_CGROUP/cgroup.procs"
done

# 2. The node's disk.
for d in etc opt varlib varlog; do
	mkdir -p "$NODE_DIR/ov/$d/up" "$NODE_DIR/ov/$d/work"
done
ov() { mount -t overlay overlay -o "lowerdir=$2,upperdir=$NODE_DIR/ov/$1/up,workdir=$NODE_DIR/ov/$1/work" "$2"; }
ov etc /etc
ov opt /opt
ov varlib /var/lib
ov varlog /var/log
# containerd's overlayfs snapshots cannot sit on an overlay: a real folder.
mkdir -p "$NODE_DIR/containerd" "$NODE_DIR/run" /var/lib/containerd
mount --bind "$NODE_DIR/containerd" /var/lib/containerd
mount --bind "$NODE_DIR/run" /run
mkdir -p /run/netns
# A sysfs of this network namespace (the host's shows the host's links),
# with the cgroup hierarchies moved over from the old one: runc finds them
# through /proc/self/mountinfo.
mkdir -p "$NODE_DIR/cgroup-move"
mount --rbind /sys/fs/cgroup "$NODE_DIR/cgroup-move"
mount -t sysfs sysfs /sys
mount --move "$NODE_DIR/cgroup-move" /sys/fs/cgroup

# What a dual-stack node's own configuration has on (kubeadm's preflight
# checks it): vmlaned, not privileged in its pod, cannot turn it on.
case $NODE_IP in
*:*) echo 1 >/proc/sys/net/ipv6/conf/all/forwarding ;;
esac

# 3. What a node's packages would have installed.
mkdir -p /etc/cni/net.d /opt/cni/bin /etc/containerd /var/lib/kubelet /var/lib/kube-proxy
cp "$CNI_BIN/loopback" /opt/cni/bin/
cp "$NODE_DIR/containerd.toml" /etc/containerd/config.toml
cp "$NODE_DIR/kubelet.yaml" /var/lib/kubelet/config.yaml
cp "$NODE_DIR/kube-proxy.yaml" /var/lib/kube-proxy/config.yaml
cp "$NODE_DIR/kubeconfig" /var/lib/kubelet/kubeconfig

# containerd finds the shim, and the shim runc, on PATH.
export PATH="$RUNTIME_BIN:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# 4. The daemons. Their logs go to the node's folder.
containerd >"$NODE_DIR/containerd.log" 2>&1 &
i=0
until [ -S /run/containerd/containerd.sock ]; do
	i=$((i + 1))
	[ $i -le 300 ] || { log "containerd did not create its socket in 30 s"; exit 1; }
	sleep 0.1
done
for img in $IMAGES; do
	ctr -n k8s.io images import "$img" >/dev/null || { log "importing $img failed"; exit 1; }
done
log "containerd up, images imported"

"$KUBELET" --config=/var/lib/kubelet/config.yaml --kubeconfig=/var/lib/kubelet/kubeconfig \
	--hostname-override="$NODE_NAME" --node-ip="$NODE_IP" --v=1 >"$NODE_DIR/kubelet.log" 2>&1 &
"$KUBE_PROXY" --config=/var/lib/kube-proxy/config.yaml >"$NODE_DIR/kube-proxy.log" 2>&1 &
log "kubelet and kube-proxy started"
echo ready >"$NODE_DIR/init.ready"
wait

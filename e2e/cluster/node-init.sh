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
# and, on the nodes of a hybrid cluster (RealNodeSpec):
#   NODE_LABELS     the kubelet's --node-labels
#   FLANNELD, FLANNEL_NETWORK  flanneld and its Network: a flannel node
#   FLANNEL_NETWORK6  its IPv6Network, on a dual-stack flannel node
#   NO_KUBE_PROXY   set on a Mac stand-in: no kube-proxy, and vmlaned from
#   VMLANE_BIN, VMLANE_VM_CONF_DIR, SERVICE_CIDR  run by the node itself
set -eu

log() { echo "node-init: $*" >&2; }

# wait_for SECONDS WHAT TEST... waits until `test TEST...` holds, polling
# every 0.1 s; after SECONDS it logs "WHAT in SECONDS s" and fails.
wait_for() {
	wait_secs=$1 wait_what=$2
	shift 2
	wait_i=0
	until test "$@"; do
		wait_i=$((wait_i + 1))
		[ $wait_i -le $((wait_secs * 10)) ] || { log "$wait_what in $wait_secs s"; return 1; }
		sleep 0.1
	done
}

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
wait_for 30 "containerd did not create its socket" -S /run/containerd/containerd.sock || exit 1
for img in $IMAGES; do
	ctr -n k8s.io images import "$img" >/dev/null || { log "importing $img failed"; exit 1; }
done
log "containerd up, images imported"

"$KUBELET" --config=/var/lib/kubelet/config.yaml --kubeconfig=/var/lib/kubelet/kubeconfig \
	--hostname-override="$NODE_NAME" --node-ip="$NODE_IP" --node-labels="${NODE_LABELS:-}" --v=1 >"$NODE_DIR/kubelet.log" 2>&1 &
if [ -z "${NO_KUBE_PROXY:-}" ]; then
	"$KUBE_PROXY" --config=/var/lib/kube-proxy/config.yaml >"$NODE_DIR/kube-proxy.log" 2>&1 &
fi
log "kubelet started${NO_KUBE_PROXY:+ (no kube-proxy)}"

# 5. A flannel node: flanneld, as kube-flannel's DaemonSet runs it, and once
# it has written subnet.env (it waits for the node's podCIDR), the
# conflist flannel's CNI plugin would hand to bridge and host-local.
if [ -n "${FLANNELD:-}" ]; then
	cp "$CNI_BIN/bridge" "$CNI_BIN/host-local" /opt/cni/bin/
	mkdir -p /etc/kube-flannel
	if [ -n "${FLANNEL_NETWORK6:-}" ]; then
		printf '{"Network": "%s", "EnableIPv6": true, "IPv6Network": "%s", "EnableNFTables": false, "Backend": {"Type": "vxlan"}}\n' \
			"$FLANNEL_NETWORK" "$FLANNEL_NETWORK6" >/etc/kube-flannel/net-conf.json
	else
		printf '{"Network": "%s", "EnableNFTables": false, "Backend": {"Type": "vxlan"}}\n' "$FLANNEL_NETWORK" >/etc/kube-flannel/net-conf.json
	fi
	# Restarted when it exits, as the kubelet restarts kube-flannel's
	# container: a test stops it (RealNode.Signal) to restart it.
	(
		while :; do
			NODE_NAME=$NODE_NAME "$FLANNELD" --kube-subnet-mgr --kubeconfig-file=/var/lib/kubelet/kubeconfig \
				--iface=eth0 --ip-masq >>"$NODE_DIR/flanneld.log" 2>&1 || true
			log "flanneld exited; starting it again in 1 s"
			sleep 1
		done
	) &
	(
		wait_for 120 "flanneld wrote no subnet.env" -s /run/flannel/subnet.env || exit 1
		. /run/flannel/subnet.env
		# FLANNEL_SUBNET is the bridge's address (10.244.1.1/24): host-local
		# takes the network (node IPAM's /24s here: the last byte is 0).
		net=${FLANNEL_SUBNET%.*/*}.0/${FLANNEL_SUBNET#*/}
		ranges="[{\"subnet\": \"$net\"}]"
		# FLANNEL_IPV6_SUBNET is the bridge's IPv6 address likewise
		# (fd00:10:244:1::1/64): the network is the ::/64 before it.
		if [ -n "${FLANNEL_IPV6_SUBNET:-}" ]; then
			net6=${FLANNEL_IPV6_SUBNET%::1/*}::/${FLANNEL_IPV6_SUBNET#*/}
			ranges="$ranges, [{\"subnet\": \"$net6\"}]"
		fi
		printf '{"cniVersion": "1.0.0", "name": "cbr0", "plugins": [{"type": "bridge", "bridge": "cni0", "isGateway": true, "isDefaultGateway": true, "ipMasq": false, "hairpinMode": true, "mtu": %s, "ipam": {"type": "host-local", "ranges": [%s]}}]}\n' \
			"$FLANNEL_MTU" "$ranges" >/etc/cni/net.d/.10-flannel.conflist.tmp
		mv /etc/cni/net.d/.10-flannel.conflist.tmp /etc/cni/net.d/10-flannel.conflist
		log "flannel: subnet $FLANNEL_SUBNET ${FLANNEL_IPV6_SUBNET:-}, conflist written"
	) &
fi

# 6. A Mac stand-in: vmlaned as launchd runs it on a Mac, outside
# Kubernetes, with a kubeconfig, routing Services to a gateway.
if [ -n "${NO_KUBE_PROXY:-}" ] && [ -n "${VMLANE_BIN:-}" ]; then
	mkdir -p /var/lib/vmlane "$VMLANE_VM_CONF_DIR"
	# As docs/install.md has a host that runs vmlaned itself install
	# them: the plugin, and portmap, which vmlaned's conflists chain.
	cp "$VMLANE_BIN/vmlane" "$VMLANE_BIN/portmap" /opt/cni/bin/
	"$VMLANE_BIN/vmlaned" --kubeconfig=/var/lib/kubelet/kubeconfig --node-name="$NODE_NAME" \
		--cni-conf-dir=/etc/cni/net.d --vm-cni-conf-dir="$VMLANE_VM_CONF_DIR" --lease-file=/var/lib/vmlane/leases.json \
		--route-services --service-cidr="$SERVICE_CIDR" --resync-period=5s >"$NODE_DIR/vmlaned.log" 2>&1 &
	log "vmlaned started (Mac stand-in)"
fi
echo ready >"$NODE_DIR/init.ready"
wait

#!/bin/sh
# vmlane-entrypoint COMMAND [ARG]...: the vmlane image's entrypoint (the
# Dockerfile and `make image` both install it as
# /usr/local/bin/vmlane-entrypoint). It points iptables and ip6tables at
# the backend whose rules the node already has, then execs its arguments.
# The two backends are separate rule sets in the kernel, and a rule added
# with one runs after every rule of the other whatever its position, so
# vmlane's rules must go where the kubelet's and kube-proxy's are. The
# detection is the one of kubernetes-sigs/iptables-wrappers (used by
# kube-proxy's image): since Kubernetes 1.17 the kubelet makes
# KUBE-IPTABLES-HINT or KUBE-KUBELET-CANARY in the mangle table of the
# backend the node uses; nft if neither backend has one.
# VMLANE_IPTABLES_MODE=nft or legacy skips the detection.
set -eu
# An image without the iptables package would otherwise fail below with
# update-alternatives' own words, or later in vmlaned.
for b in iptables-nft iptables-legacy update-alternatives; do
	if ! command -v "$b" >/dev/null 2>&1; then
		echo "vmlane-entrypoint: $b is not in this image: vmlane needs Debian's iptables package (manifests/image/packages)" >&2
		exit 1
	fi
done
mode=${VMLANE_IPTABLES_MODE:-auto}
hint='^:(KUBE-IPTABLES-HINT|KUBE-KUBELET-CANARY)'
if [ "$mode" = auto ]; then
	mode=nft
	if iptables-nft-save -t mangle 2>/dev/null | grep -Eq "$hint" ||
		ip6tables-nft-save -t mangle 2>/dev/null | grep -Eq "$hint"; then
		mode=nft
	# All tables, not -t mangle: naming a legacy table makes the kernel
	# create it.
	elif iptables-legacy-save 2>/dev/null | grep -Eq "$hint" ||
		ip6tables-legacy-save 2>/dev/null | grep -Eq "$hint"; then
		mode=legacy
	fi
fi
case $mode in
nft | legacy) ;;
*)
	echo "vmlane-entrypoint: invalid VMLANE_IPTABLES_MODE=$mode: want auto, nft or legacy" >&2
	exit 2
	;;
esac
for cmd in iptables ip6tables; do
	update-alternatives --quiet --set "$cmd" "/usr/sbin/$cmd-$mode"
done
echo "vmlane-entrypoint: iptables backend: $mode" >&2
exec "$@"

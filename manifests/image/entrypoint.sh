#!/bin/sh
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

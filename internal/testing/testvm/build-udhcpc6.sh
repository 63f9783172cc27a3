#!/usr/bin/env bash
# build-udhcpc6.sh [--print-dir] OUTDIR
#
# Builds OUTDIR/busybox-udhcpc6: a static busybox with the udhcpc6 applet
# only, for the DHCPv6 client tests and the QEMU test guest. Debian's
# busybox packages are built without udhcpc6, so this builds Debian's
# busybox source package (fetched through apt from deb.debian.org's
# deb-src, with a private sources list: the system's apt configuration is
# not touched), upstream tarball, with an allnoconfig plus udhcpc6.
#
# The key (printed on stdout; with --print-dir the absolute path of the
# binary instead) is the source package's version plus a hash of this
# script; OUTDIR/.stamp holds it, written last. A second run with the same
# key returns at once. Needs gcc, make, bzip2 and libc6-dev (installed
# with apt when missing, as root). About 10 s of compiling on 2 cores.
set -euo pipefail

print_dir=0
if [[ ${1:-} == --print-dir ]]; then
	print_dir=1
	shift
fi
if [[ $# -ne 1 ]]; then
	echo "usage: $0 [--print-dir] OUTDIR" >&2
	exit 2
fi
mkdir -p "$1"
out=$(cd "$1" && pwd)
log() { echo "build-udhcpc6: $*" >&2; }

# The applet and the options it is built with.
options=(STATIC FEATURE_IPV6 LONG_OPTS UDHCPC6 FEATURE_UDHCPC6_RFC3646 FEATURE_UDHCPC6_RFC4704 FEATURE_UDHCPC6_RFC4833 FEATURE_UDHCPC6_RFC5970)

script_hash=$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-12)
result() {
	if [[ $print_dir -eq 1 ]]; then
		echo "$out/busybox-udhcpc6"
	else
		cat "$out/.stamp"
	fi
}
# A complete build of this script is reused without asking apt anything:
# the source version is only looked up to build.
if [[ -f $out/.stamp && -x $out/busybox-udhcpc6 ]] && grep -q "_$script_hash\$" "$out/.stamp"; then
	log "up to date: $out ($(cat "$out/.stamp"))"
	result
	exit 0
fi

need=()
for p in gcc make bzip2 libc6-dev; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || need+=("$p")
done
if [[ ${#need[@]} -gt 0 ]]; then
	[[ $(id -u) -eq 0 ]] || { log "missing packages: ${need[*]} (run as root to install them)"; exit 1; }
	log "installing ${need[*]}"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/vmlane-udhcpc6.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# The suite of the system's own sources.
suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
echo "deb-src http://deb.debian.org/debian $suite main" >"$tmp/sources.list"
mkdir -p "$tmp/lists/partial"
apt_private=(-o Dir::Etc::SourceList="$tmp/sources.list" -o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists="$tmp/lists" -o APT::Sandbox::User=root)
log "fetching the busybox source package index ($suite)"
apt-get -qq "${apt_private[@]}" update >&2
version=$(apt-cache "${apt_private[@]}" showsrc busybox | sed -n 's/^Version: //p' | sort -V | tail -1)
[[ -n $version ]] || { log "error: no busybox source package in $suite"; exit 1; }
key="busybox-${version}_$script_hash"
log "downloading busybox $version source"
(cd "$tmp" && apt-get -qq "${apt_private[@]}" source --download-only "busybox=$version" >&2 2>/dev/null) ||
	(cd "$tmp" && apt-get -qq "${apt_private[@]}" source --download-only busybox >&2)
orig=$(ls "$tmp"/busybox_*.orig.tar.* | head -1)
mkdir "$tmp/src"
tar -xf "$orig" -C "$tmp/src" --strip-components=1

log "building (allnoconfig + ${options[*]})"
cd "$tmp/src"
make -s allnoconfig >/dev/null
for o in "${options[@]}"; do
	sed -i "s/^# CONFIG_$o is not set\$/CONFIG_$o=y/" .config
done
yes "" | make -s oldconfig >/dev/null 2>&1 || true
for o in "${options[@]}"; do
	grep -q "^CONFIG_$o=y\$" .config || { log "error: CONFIG_$o did not stick"; exit 1; }
done
make -s -j"$(nproc)" busybox >"$tmp/build.log" 2>&1 || { tail -30 "$tmp/build.log" >&2; exit 1; }
./busybox udhcpc6 --help >/dev/null 2>&1 || [[ $? -eq 1 ]] # usage exits 1

mkdir -p "$out"
install -m 0755 busybox "$out/busybox-udhcpc6.tmp"
mv "$out/busybox-udhcpc6.tmp" "$out/busybox-udhcpc6"
echo "$key" >"$out/.stamp"
log "built $out/busybox-udhcpc6 ($key)"
result

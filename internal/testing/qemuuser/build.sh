#!/usr/bin/env bash
# build.sh [--print-dir] OUTDIR
#
# Unpacks Debian's qemu-aarch64-static into OUTDIR/<version>/, for the
# checks of the arm64 image that run here (internal/tools/imagebuild's
# TestBuiltImages: the image's vmlaned and iptables run under it). The
# package is downloaded with apt-get download and unpacked with dpkg-deb,
# not installed: its maintainer script would register binfmt handlers
# where binfmt-support is installed, and the host's kernel settings stay
# as they are. The checks call the emulator directly (qemu-aarch64-static
# -L ROOT PROGRAM).
#
# stdout gets the version, or with --print-dir the program's absolute
# path. A second run finds OUTDIR/<version>/.stamp and asks apt nothing
# but the candidate version.
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
log() { echo "qemu-user: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}
# Bump when the way it is unpacked changes.
recipe=1

candidate() { apt-cache policy qemu-user-static 2>/dev/null | sed -n 's/^ *Candidate: //p'; }
version=$(candidate)
if [[ -z $version || $version == "(none)" ]]; then
	log "no package lists: apt-get update"
	apt-get update -qq >&2 || die "apt-get update failed"
	version=$(candidate)
fi
[[ -n $version && $version != "(none)" ]] || die "apt knows no qemu-user-static package"
dir=$out/${version//:/_}
result() {
	if [[ $print_dir -eq 1 ]]; then
		echo "$dir/qemu-aarch64-static"
	else
		echo "$version"
	fi
}
if [[ -f $dir/.stamp && $(<"$dir/.stamp") == "$version recipe=$recipe" ]]; then
	result
	exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vmlane-qemu-user.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
log "downloading qemu-user-static $version (unpacked, not installed)"
(cd "$tmp" && apt-get download -qq -o APT::Sandbox::User=root "qemu-user-static=$version" >&2) || die "apt-get download qemu-user-static=$version failed"
dpkg-deb -x "$tmp"/qemu-user-static_*.deb "$tmp/x" || die "unpacking the package"
[[ -x $tmp/x/usr/bin/qemu-aarch64-static ]] || die "the package has no usr/bin/qemu-aarch64-static"
rm -rf "$dir"
mkdir -p "$dir"
install -m 0755 "$tmp/x/usr/bin/qemu-aarch64-static" "$dir/"
echo "$version recipe=$recipe" >"$dir/.stamp"
log "$dir/qemu-aarch64-static"
result

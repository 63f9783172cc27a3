#!/usr/bin/env bash
# build.sh [--print-dir] CACHE_DIR
#
# Builds and caches the container runtime of the e2e suite's real nodes
# (e2e/cluster, RealNode):
#
#   CACHE_DIR/<v>/containerd, ctr, containerd-shim-runc-v2
#                     containerd <v> (default below), from the module proxy
#   CACHE_DIR/<v>/containerd-1.6/containerd, ctr, containerd-shim-runc-v2
#                     Debian 12's containerd package, unpacked (never
#                     installed): the old runtime whose libcni reads
#                     cniVersion alone
#   CACHE_DIR/<v>/versions.env   what was built
#   CACHE_DIR/<v>/.stamp         written last: the build is complete
#
# runc is Debian's package (`make deps` installs it); containerd finds it
# on PATH. stdout gets the key or, with --print-dir, the absolute output
# directory, for VMLANE_REALNODE_DIR=$(... --print-dir DIR). Progress goes
# to stderr. A second run with the build present returns at once. Expect
# about a minute cold on two cores with a warm module cache.
#
# Environment:
#   VMLANE_CONTAINERD_VERSION  github.com/containerd/containerd/v2 version
set -euo pipefail

default_containerd_version=v2.2.9
# Bump when the way things are built changes.
recipe=1

print_dir=0
if [[ ${1:-} == --print-dir ]]; then
	print_dir=1
	shift
fi
if [[ $# -ne 1 ]]; then
	echo "usage: $0 [--print-dir] CACHE_DIR" >&2
	exit 2
fi
cache=$1
cv=${VMLANE_CONTAINERD_VERSION:-$default_containerd_version}
[[ $cv =~ ^v2\.[0-9]+\.[0-9]+$ ]] || {
	echo "build.sh: VMLANE_CONTAINERD_VERSION=$cv is not a v2.MINOR.PATCH release" >&2
	exit 2
}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
out=$cache/$cv

log() { echo "realnode: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}
result() {
	if [[ $print_dir -eq 1 ]]; then
		(cd "$out" && pwd)
	else
		cat "$out/.stamp"
	fi
}
up_to_date() {
	[[ -f $out/.stamp && $(<"$out/.stamp") == "containerd=$cv recipe=$recipe" ]]
}

if up_to_date; then
	result
	exit 0
fi
mkdir -p "$cache"
exec 9>"$cache/.lock"
if ! flock -n 9; then
	log "waiting for another build in $cache"
	flock 9
fi
if up_to_date; then
	result
	exit 0
fi

command -v go >/dev/null || die "go is not on PATH"
command -v runc >/dev/null || die "runc is missing (make deps installs Debian's)"
start=$SECONDS
rm -f "$out/.stamp"
mkdir -p "$out/containerd-1.6"

# --- containerd, from the module proxy -------------------------------------
# go install pkg@version builds with containerd's own go.mod and go.sum
# (resolving it inside a module of ours fails on go.sum). The tags leave out
# snapshotters nothing here uses.
log "containerd $cv: building containerd, ctr, containerd-shim-runc-v2"
t0=$SECONDS
(
	export GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOBIN=$out
	go install -trimpath -tags "no_btrfs no_devmapper no_zfs no_aufs" \
		-ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$cv" \
		"github.com/containerd/containerd/v2/cmd/containerd@$cv" \
		"github.com/containerd/containerd/v2/cmd/ctr@$cv" \
		"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$cv"
) &
pid=$!
while kill -0 $pid 2>/dev/null; do
	for _ in {1..20}; do
		sleep 1
		kill -0 $pid 2>/dev/null || break 2
	done
	log "containerd $cv: still building, $((SECONDS - t0))s"
done
wait $pid || die "building containerd $cv failed"
log "containerd $cv: built in $((SECONDS - t0))s"

# --- Debian's containerd 1.6 -------------------------------------------------
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vmlane-realnode.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if ! (cd "$tmp" && apt-get download containerd >/dev/null 2>&1); then
	log "apt-get download containerd failed: updating the package lists"
	apt-get update -qq >/dev/null
	(cd "$tmp" && apt-get download containerd >/dev/null) || die "apt-get download containerd failed"
fi
deb=$(ls "$tmp"/containerd_*.deb)
dv=$(dpkg-deb -f "$deb" Version)
dpkg -x "$deb" "$tmp/x"
for b in containerd ctr containerd-shim-runc-v2; do
	install -m 0755 "$tmp/x/usr/bin/$b" "$out/containerd-1.6/$b"
done
log "Debian containerd $dv unpacked"

{
	echo "CONTAINERD_VERSION=$cv"
	echo "DEBIAN_CONTAINERD_VERSION=$dv"
	echo "RUNC_VERSION=$(runc --version | sed -n 's/^runc version //p')"
	echo "GO_VERSION=$(go env GOVERSION)"
} >"$out/versions.env"
"$out/containerd" --version >&2
"$out/containerd-1.6/containerd" --version >&2
echo "containerd=$cv recipe=$recipe" >"$out/.stamp.tmp"
mv -f "$out/.stamp.tmp" "$out/.stamp"
log "built $out in $((SECONDS - start))s"
result

#!/usr/bin/env bash
# build.sh [--print-dir] CACHE_DIR COMMIT BIN_DIR
#
# Builds the vmlane image of an earlier version, for the real-node suite's
# roll back and forward (TestRollBackAndForward): there is no release yet,
# so the previous version is a commit of this repository's history
# (Makefile's PREVIOUS; once a release exists, its tag). Into
#
#   CACHE_DIR/<commit>/images/vmlane.tar  ghcr.io/vmlane/vmlane:previous
#   CACHE_DIR/<commit>/.stamp             written last
#
# from `git archive COMMIT` of this clone: that commit's binaries, built
# with its own go.mod, and its own image build (its
# internal/tools/imagebuild/build.sh, its Debian root and entrypoint), with
# the reference portmap plugin from BIN_DIR (make build's, the same
# version). Cached by commit: built once, a minute or two.
#
# stdout gets the commit or, with --print-dir, the absolute path of the
# image tarball.
set -euo pipefail

print_dir=0
if [[ ${1:-} == --print-dir ]]; then
	print_dir=1
	shift
fi
if [[ $# -ne 3 ]]; then
	echo "usage: $0 [--print-dir] CACHE_DIR COMMIT BIN_DIR" >&2
	exit 2
fi
mkdir -p "$1"
cache=$(cd "$1" && pwd)
bin=$(cd "$3" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)
log() { echo "previous build.sh: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}
commit=$(git -C "$repo" rev-parse --verify --quiet "$2^{commit}") || {
	# A shallow clone (CI's may be) lacks the history: fetch it once.
	if [[ $(git -C "$repo" rev-parse --is-shallow-repository 2>/dev/null) == true ]]; then
		log "a shallow clone: git fetch --unshallow for $2"
		git -C "$repo" fetch --quiet --unshallow >&2 || true
	fi
	commit=$(git -C "$repo" rev-parse --verify --quiet "$2^{commit}") ||
		die "this clone has no commit $2, and its history could not be fetched (git fetch --unshallow)"
}
# Bump when the way the previous version is built changes.
recipe=1
out=$cache/$commit
result() {
	if [[ $print_dir -eq 1 ]]; then
		echo "$out/images/vmlane.tar"
	else
		echo "$commit"
	fi
}
up_to_date() { [[ -f $out/.stamp && $(<"$out/.stamp") == "$commit recipe=$recipe" && -f $out/images/vmlane.tar ]]; }
if up_to_date; then
	result
	exit 0
fi
exec 9>"$cache/.lock"
flock 9
if up_to_date; then
	result
	exit 0
fi
[[ -x $bin/portmap ]] || die "$bin/portmap is missing: run make build"
rm -rf "$out"
mkdir -p "$out/src" "$out/bin"
log "vmlane at ${commit:0:12}: its source, binaries and image"
git -C "$repo" archive "$commit" | tar -x -C "$out/src" || die "git archive $commit"
(cd "$out/src" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath \
	-ldflags "-X main.version=${commit:0:12}" -o "$out/bin/" ./cmd/...) || die "building the binaries of $commit"
cp "$bin/portmap" "$out/bin/portmap"
VMLANE_IMAGE_TAG=previous bash "$out/src/internal/tools/imagebuild/build.sh" "$out/images" "$out/bin" >/dev/null ||
	die "building the image of $commit"
# What the image build leaves beside the tarball: only vmlane.tar is used.
rm -rf "$out/src" "$out/images"/rootfs-* "$out/images/pause.tar" "$out/images/busybox.tar"
echo "$commit recipe=$recipe" >"$out/.stamp"
result

#!/usr/bin/env bash
# build-flannel.sh [--print-dir] CACHE_DIR
#
# Builds a static flanneld for the e2e suite's real nodes (e2e/cluster,
# RealNode), from source fetched through the Go module proxy (no release
# binaries, no images), into
#
#   CACHE_DIR/<flannel version>/flanneld
#   CACHE_DIR/<flannel version>/versions.env  what was built
#   CACHE_DIR/<flannel version>/.stamp        written last: "flannel=..."
#
# `go install github.com/flannel-io/flannel@VERSION` does not work here:
# main.go imports every backend for its init(), and two of them cannot be
# built. pkg/backend/tencentvpc imports
# github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/vpc, whose zip
# the proxy refuses (403, "not available"); pkg/backend/udp is cgo, and the
# binary must be static (CGO_ENABLED=0, as flannel's own non-amd64 builds).
# So a scratch module (CACHE_DIR/src/flannel-<version>/, generated here)
# holds flannel's own main.go, copied from the module cache at build time
# with those two import lines left out, and a go.mod and go.sum that are
# flannel's with the module line changed and flannel itself required: the
# dependencies resolve exactly as in flannel's release. The other backends
# (vxlan, host-gw, ipip, ipsec, wireguard, extension, alloc) are all kept.
# Nothing of flannel is copied into the repository.
#
# stdout gets the key ("flannel=... recipe=...") or, with --print-dir, the
# absolute output directory, for VMLANE_FLANNEL_DIR=$(... --print-dir DIR).
# Progress goes to stderr. A second run with the binary present returns at
# once without running go. Expect about 3 minutes cold on two cores.
#
# Environment:
#   VMLANE_FLANNEL_VERSION  github.com/flannel-io/flannel version (default
#                           below)
#
# Touches nothing outside CACHE_DIR but the Go module and build caches.
set -euo pipefail

# The newest flannel release the proxy serves (go list -m -versions
# github.com/flannel-io/flannel).
default_flannel_version=v0.28.10
# Bump when the way flanneld is built changes (flags, ldflags, backends),
# so that caches of an older recipe are rebuilt.
recipe=1
# The backends main.go imports that cannot be built here (see above).
omitted_backends=(tencentvpc udp)

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
fv=${VMLANE_FLANNEL_VERSION:-$default_flannel_version}
[[ $fv =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || {
	echo "build-flannel.sh: VMLANE_FLANNEL_VERSION=$fv is not a vMAJOR.MINOR.PATCH release" >&2
	exit 2
}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
out=$cache/$fv

log() { echo "build-flannel.sh: $*" >&2; }
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

# up_to_date reports whether $out holds a complete build of this version
# and recipe.
up_to_date() {
	[[ -f $out/.stamp && -x $out/flanneld ]] || return 1
	[[ $(<"$out/.stamp") == "flannel=$fv recipe=$recipe" ]]
}

# Fast path, without the lock or the go command: .stamp is written last.
if up_to_date; then
	result
	exit 0
fi

# One build at a time per cache; the second one waits, then finds the first
# one's build. A lock file of its own, not build.sh's .lock: CACHE_DIR may
# be shared with it, and one script may one day run the other.
exec 9>"$cache/.flannel.lock"
if ! flock -n 9; then
	log "waiting for another flannel build in $cache"
	flock 9
fi
if up_to_date; then
	log "up to date: $out"
	result
	exit 0
fi

command -v go >/dev/null || die "go is not on PATH"
# The scratch module is ours alone: no workspace, and -mod=mod so go may add
# flannel's own checksum to its go.sum. CGO off: a static binary, without
# the udp backend.
export GOWORK=off GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0
start=$SECONDS
rm -f "$out/.stamp"
mkdir -p "$cache/src"

# download and gobuild.
. "$(dirname "${BASH_SOURCE[0]}")/../buildlib/gobuild.sh"

# --- the scratch module -----------------------------------------------------
log "flannel $fv: downloading github.com/flannel-io/flannel"
fdir=$(download "github.com/flannel-io/flannel@$fv")
grep -q '^package main$' "$fdir/main.go" || die "$fdir/main.go is not package main: where is flanneld's main?"
# A replace directive to a local path would not survive the move.
if grep -Eq '=>[[:space:]]*\.{1,2}/' "$fdir/go.mod"; then
	die "$fdir/go.mod replaces a module with a local path; this recipe cannot build it"
fi

fsrc=$cache/src/flannel-$fv
rm -rf "$fsrc"
mkdir -p "$fsrc"

# main.go, without the blank imports of the omitted backends. Each must be
# found and gone, so that a flannel that moves or renames one fails here and
# not with a puzzling compile or download error.
omitted_re=$(
	IFS='|'
	echo "${omitted_backends[*]}"
)
omitted_import="github\.com/flannel-io/flannel/pkg/backend/($omitted_re)\""
n=$(grep -Ec "^[[:space:]]*_[[:space:]]+\"$omitted_import[[:space:]]*$" "$fdir/main.go" || true)
[[ $n -eq ${#omitted_backends[@]} ]] ||
	die "$fdir/main.go: expected ${#omitted_backends[@]} blank imports of pkg/backend/{${omitted_re//|/,}}, found $n"
{
	echo "// Code generated by internal/testing/realnode/build-flannel.sh from flannel $fv's main.go; DO NOT EDIT."
	echo "// Scratch module, not committed. Left out: the ${omitted_backends[*]} backends."
	echo
	sed -E "\#^[[:space:]]*_[[:space:]]+\"$omitted_import[[:space:]]*\$#d" "$fdir/main.go"
} >"$fsrc/main.go"
if grep -Eq "$omitted_import" "$fsrc/main.go"; then
	die "$fsrc/main.go still refers to an omitted backend"
fi

# go.mod and go.sum: flannel's, so that every dependency is at flannel's
# version (go, godebug, toolchain and replace directives included), under a
# module path of ours, plus flannel itself for its packages.
{
	echo "// Generated by internal/testing/realnode/build-flannel.sh from flannel $fv's go.mod; scratch module, not committed."
	sed -E 's|^module[[:space:]].*$|module vmlane.invalid/realnode/flannel|' "$fdir/go.mod"
	echo
	echo "require github.com/flannel-io/flannel $fv"
} >"$fsrc/go.mod"
grep -q '^module vmlane.invalid/realnode/flannel$' "$fsrc/go.mod" || die "no module line in $fdir/go.mod"
cp "$fdir/go.sum" "$fsrc/go.sum"
chmod u+w "$fsrc/go.sum"

# --- flanneld -----------------------------------------------------------------
# What `flanneld --version` prints, as flannel's Makefile sets it.
ldflags="-s -w -X github.com/flannel-io/flannel/pkg/version.Version=$fv"
mkdir -p "$out"
(cd "$fsrc" && gobuild flanneld "$out/flanneld" . -ldflags "$ldflags")

# --- done -----------------------------------------------------------------
got=$("$out/flanneld" --version 2>&1) || die "$out/flanneld --version failed: $got"
[[ $got == "$fv" ]] || die "$out/flanneld --version says $got, not $fv"
{
	echo "FLANNEL_VERSION=$fv"
	echo "FLANNEL_OMITTED_BACKENDS=\"${omitted_backends[*]}\""
	echo "GO_VERSION=$(go env GOVERSION)"
} >"$out/versions.env"
log "flanneld $got"
echo "flannel=$fv recipe=$recipe" >"$out/.stamp.tmp"
mv -f "$out/.stamp.tmp" "$out/.stamp"
log "built $out in $((SECONDS - start))s"
result

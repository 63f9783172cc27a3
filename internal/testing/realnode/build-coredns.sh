#!/usr/bin/env bash
# build-coredns.sh [--print-dir] CACHE_DIR
#
# Builds CoreDNS, the cluster DNS of the e2e suite's real-node clusters and
# of `make demo` (a cluster users have always has one), from source fetched
# through the Go module proxy (no release binaries, no images), and packs
# it as an image the nodes import, into
#
#   CACHE_DIR/<coredns version>/coredns      the static binary
#   CACHE_DIR/<coredns version>/coredns.tar  vmlane.test/coredns:<version>,
#                                            /coredns and nothing else
#   CACHE_DIR/<coredns version>/.stamp       written last
#
# `go install github.com/coredns/coredns@VERSION` builds it as its own
# release does (its go.mod has no replace directives), with its default
# plugins. stdout gets the key or, with --print-dir, the absolute output
# directory. Progress goes to stderr. A second run with both present
# returns at once. Expect about 2 minutes cold on two cores.
#
# Environment:
#   VMLANE_COREDNS_VERSION  github.com/coredns/coredns version (default below)
#
# Touches nothing outside CACHE_DIR but the Go module and build caches.
set -euo pipefail

# The CoreDNS of kubeadm's Kubernetes v1.37 line that the proxy serves
# (go list -m -versions github.com/coredns/coredns).
default_coredns_version=v1.14.7
# Bump when the way it is built or packed changes.
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
cv=${VMLANE_COREDNS_VERSION:-$default_coredns_version}
[[ $cv =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || {
	echo "build-coredns.sh: VMLANE_COREDNS_VERSION=$cv is not a vMAJOR.MINOR.PATCH release" >&2
	exit 2
}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
out=$cache/$cv
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)

log() { echo "build-coredns.sh: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}
key="coredns=$cv recipe=$recipe"
result() {
	if [[ $print_dir -eq 1 ]]; then
		(cd "$out" && pwd)
	else
		echo "$key"
	fi
}
up_to_date() {
	[[ -f $out/.stamp && -x $out/coredns && -f $out/coredns.tar && $(<"$out/.stamp") == "$key" ]]
}
if up_to_date; then
	result
	exit 0
fi
exec 9>"$cache/.coredns.lock"
if ! flock -n 9; then
	log "waiting for another CoreDNS build in $cache"
	flock 9
fi
if up_to_date; then
	result
	exit 0
fi
command -v go >/dev/null || die "go is not on PATH"
start=$SECONDS
rm -f "$out/.stamp"
mkdir -p "$out/bin"
log "CoreDNS $cv: go install github.com/coredns/coredns@$cv (about 2 minutes cold)"
GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOBIN=$out/bin \
	go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@$cv" || die "building CoreDNS $cv"
mv -f "$out/bin/coredns" "$out/coredns"
got=$("$out/coredns" -version 2>&1 | head -n 1) || die "$out/coredns -version failed: $got"
[[ $got == *"${cv#v}"* ]] || die "$out/coredns -version says $got, not $cv"

stage=$out/stage
rm -rf "$stage"
mkdir -p "$stage"
install -m 0755 "$out/coredns" "$stage/coredns"
(cd "$repo" && CGO_ENABLED=0 go run ./internal/tools/imagebuild pack -dir "$stage" -tag "vmlane.test/coredns:$cv" \
	-entrypoint /coredns -o "$out/coredns.tar") || die "packing the CoreDNS image"
rm -rf "$stage" "$out/bin"
echo "$key" >"$out/.stamp.tmp"
mv -f "$out/.stamp.tmp" "$out/.stamp"
log "built $out ($got) in $((SECONDS - start))s"
result

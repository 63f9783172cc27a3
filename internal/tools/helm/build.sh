#!/usr/bin/env bash
# build.sh [--print-dir] CACHE_DIR
#
# Builds the helm command from its module on the Go module proxy (no
# release binary), for the chart's checks (`make lint`: helm lint and
# manifests/ against the rendered chart), `make manifests`, and the e2e
# test that installs the chart:
#
#   CACHE_DIR/<helm version>/helm
#   CACHE_DIR/<helm version>/.stamp   written last: "helm=... recipe=..."
#
# stdout gets the key or, with --print-dir, the absolute path of helm.
# Progress goes to stderr. A second run returns at once without the go
# command. About two minutes cold on two cores.
#
# Environment:
#   VMLANE_HELM_VERSION  helm.sh/helm/v4 version (default below)
#
# Touches nothing outside CACHE_DIR but the Go module and build caches.
set -euo pipefail

# The newest Helm 4 the proxy serves (go list -m -versions helm.sh/helm/v4).
default_helm_version=v4.3.1
# Bump when the way helm is built changes.
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
hv=${VMLANE_HELM_VERSION:-$default_helm_version}
[[ $hv =~ ^v4\.[0-9]+\.[0-9]+$ ]] || {
	echo "helm build.sh: VMLANE_HELM_VERSION=$hv is not a v4.MINOR.PATCH release" >&2
	exit 2
}
mkdir -p "$1"
cache=$(cd "$1" && pwd)
out=$cache/$hv
log() { echo "helm build.sh: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}
result() {
	if [[ $print_dir -eq 1 ]]; then
		echo "$out/helm"
	else
		cat "$out/.stamp"
	fi
}
up_to_date() {
	[[ -f $out/.stamp && -x $out/helm && $(<"$out/.stamp") == "helm=$hv recipe=$recipe" ]]
}
if up_to_date; then
	result
	exit 0
fi
exec 9>"$cache/.lock"
if ! flock -n 9; then
	log "waiting for another helm build in $cache"
	flock 9
fi
if up_to_date; then
	result
	exit 0
fi
command -v go >/dev/null || die "go is not on PATH"
rm -f "$out/.stamp"
mkdir -p "$out" "$cache/src"
# gobuild's goprogress.
. "$(dirname "${BASH_SOURCE[0]}")/../../testing/buildlib/gobuild.sh"
export GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0
tmpbin=$(mktemp -d "$cache/src/bin.XXXXXX")
trap 'rm -rf "$tmpbin"' EXIT
log "helm $hv: go install helm.sh/helm/v4/cmd/helm@$hv"
# go install of a module at a version: helm's own go.mod and go.sum, as
# its release builds resolve them.
goprogress "helm $hv" "$out/helm" 'grep -c . "$dst.log"' \
	sh -c 'GOBIN="$1" go install -v -trimpath -ldflags "-X helm.sh/helm/v4/internal/version.version=$2" "helm.sh/helm/v4/cmd/helm@$2" && mv "$1/helm" "$3.tmp"' \
	sh "$tmpbin" "$hv" "$out/helm"
"$out/helm" version >/dev/null || die "the built helm does not run"
echo "helm=$hv recipe=$recipe" >"$out/.stamp"
result

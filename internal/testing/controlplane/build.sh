#!/usr/bin/env bash
# build.sh [--print-dir] CACHE_DIR
#
# Builds a real kube-apiserver, etcd and kubectl for vmlane's integration
# and e2e tests, from source fetched through the Go module proxy (no release
# tarballs, no images), into
#
#   CACHE_DIR/<kubernetes version>/kube-apiserver
#   CACHE_DIR/<kubernetes version>/kubectl       (Debian 12 has no kubectl
#                                                package; the e2e suite
#                                                applies manifests/ with it)
#   CACHE_DIR/<kubernetes version>/etcd
#   CACHE_DIR/<kubernetes version>/versions.env  what was built, and the
#                                                client-go/api/apimachinery
#                                                versions that match it
#   CACHE_DIR/<kubernetes version>/.stamp        written last: "complete"
#
# kube-apiserver and kubectl come from k8s.io/kubernetes, which is not meant
# to be used as a module: its go.mod points every k8s.io staging module at
# ./staging/src/..., and those replace directives are ignored when it is a
# dependency. So a scratch module (CACHE_DIR/src/, generated here) requires
# it and replaces each staging module it names with the published
# k8s.io/NAME v0.<minor>.<patch>, which is the same code. Both binaries are
# tools of that one module, so they share its dependency resolution and are
# exactly the release's kube-apiserver and kubectl. etcd comes from
# go.etcd.io/etcd/server/v3, whose root package is the etcd binary's main,
# at the version kubernetes itself tests against (hack/lib/etcd.sh), in a
# scratch module of its own so that its dependencies are resolved as etcd's
# and not unified with kubernetes'.
#
# stdout gets the key ("kubernetes=... etcd=...") or, with --print-dir, the
# absolute output directory, for VMLANE_CONTROLPLANE_DIR=$(... --print-dir
# DIR). Progress goes to stderr. A second run with the binaries present
# returns at once without running go. Expect about 10 minutes cold on two
# cores, mostly compiling kube-apiserver and the kubelet; the other
# binaries then reuse most of their packages from the build cache.
#
# Environment:
#   VMLANE_KUBERNETES_VERSION  k8s.io/kubernetes version (default below)
#   VMLANE_ETCD_VERSION        go.etcd.io/etcd/server/v3 version (default:
#                              the one kubernetes' hack/lib/etcd.sh names)
#
# Touches nothing outside CACHE_DIR but the Go module and build caches.
set -euo pipefail

# The newest kubernetes release whose module zip the proxy serves and that
# builds this way. The main module's k8s.io/client-go must be
# v0.<minor>.<patch> of the same release (versions.env says which).
default_kubernetes_version=v1.37.2
# Bump when the way the binaries are built changes (flags, ldflags, which
# binaries), so that caches of an older recipe are rebuilt.
# 2: kubectl added.
# 3: kube-controller-manager, kube-scheduler, kubelet and kube-proxy added
#    (real nodes in e2e/cluster).
recipe=3

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
kv=${VMLANE_KUBERNETES_VERSION:-$default_kubernetes_version}
[[ $kv =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || {
	echo "build.sh: VMLANE_KUBERNETES_VERSION=$kv is not a v1.MINOR.PATCH release" >&2
	exit 2
}
minor=${BASH_REMATCH[1]}
patch=${BASH_REMATCH[2]}
# The staging modules (client-go, api, apimachinery, ...) are tagged
# v0.<minor>.<patch> for kubernetes v1.<minor>.<patch>.
staging_version=v0.$minor.$patch
out=$cache/$kv

# The binaries built from k8s.io/kubernetes, in build order: the apiserver
# first, whose packages most of the others then reuse from the build cache.
kube_binaries=(kube-apiserver kubectl kube-controller-manager kube-scheduler kubelet kube-proxy)

log() { echo "build.sh: $*" >&2; }
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

# up_to_date reports whether $out holds a complete build of this recipe
# (and of VMLANE_ETCD_VERSION, when that is set).
up_to_date() {
	[[ -f $out/.stamp && -x $out/etcd ]] || return 1
	local b
	for b in "${kube_binaries[@]}"; do
		[[ -x $out/$b ]] || return 1
	done
	local stamp
	stamp=$(<"$out/.stamp")
	[[ $stamp == "kubernetes=$kv "* && $stamp == *" recipe=$recipe" ]] || return 1
	[[ -z ${VMLANE_ETCD_VERSION:-} || $stamp == *" etcd=$VMLANE_ETCD_VERSION "* ]]
}

# Fast path, without the lock or the go command: .stamp is written last.
if up_to_date; then
	result
	exit 0
fi

# One build at a time per cache (make -j, two test runs at once); the second
# one waits, then finds the first one's build.
mkdir -p "$cache"
exec 9>"$cache/.lock"
if ! flock -n 9; then
	log "waiting for another build in $cache"
	flock 9
fi
if up_to_date; then
	log "up to date: $out"
	result
	exit 0
fi

command -v go >/dev/null || die "go is not on PATH"
# The scratch modules are ours alone: no workspace, and -mod=mod so go may
# write their go.mod and go.sum. CGO off, as kubernetes' release builds.
export GOWORK=off GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0
start=$SECONDS
rm -f "$out/.stamp"
mkdir -p "$out" "$cache/src"

# download and gobuild.
. "$(dirname "${BASH_SOURCE[0]}")/../buildlib/gobuild.sh"

# gomod_directives prints the go and godebug lines of a go.mod, so that the
# scratch module runs its main package with the language version and
# GODEBUG defaults its authors chose (godebug only counts in the main
# module).
gomod_directives() {
	grep -E '^(go|godebug) ' "$1" || true
	sed -n '/^godebug (/,/^)/p' "$1"
}

# --- kube-apiserver and kubectl ---------------------------------------------
log "kubernetes $kv: downloading k8s.io/kubernetes"
kdir=$(download "k8s.io/kubernetes@$kv")
# The staging modules are the ones kubernetes replaces with ./staging/src.
mapfile -t staging < <(sed -n 's|^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/src/.*$|\1|p' "$kdir/go.mod")
[[ ${#staging[@]} -gt 0 ]] || die "no staging replace directives in $kdir/go.mod"
log "kubernetes $kv: ${#staging[@]} staging modules at $staging_version"

ksrc=$cache/src/kubernetes-$kv
rm -rf "$ksrc"
mkdir -p "$ksrc"
{
	echo "// Generated by internal/testing/controlplane/build.sh; scratch module, not committed."
	echo "module vmlane.invalid/controlplane/kubernetes"
	echo
	gomod_directives "$kdir/go.mod"
	echo
	echo "require k8s.io/kubernetes $kv"
	echo
	for b in "${kube_binaries[@]}"; do
		echo "tool k8s.io/kubernetes/cmd/$b"
	done
	echo
	echo "replace ("
	for m in "${staging[@]}"; do
		echo "	$m => $m $staging_version"
	done
	echo ")"
} >"$ksrc/go.mod"

t0=$SECONDS
log "kubernetes $kv: resolving dependencies (go mod tidy)"
(cd "$ksrc" && go mod tidy) || die "go mod tidy in $ksrc failed"
log "kubernetes $kv: dependencies resolved in $((SECONDS - t0))s"

# What `kubectl version` and /version report, as hack/lib/version.sh sets
# it; without it the server calls itself v0.0.0-master and its emulation
# version logic complains, and kubectl's version skew warning compares
# against v0.0.0.
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$kv -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
	ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
for b in "${kube_binaries[@]}"; do
	(cd "$ksrc" && gobuild "$b" "$out/$b" "k8s.io/kubernetes/cmd/$b" -ldflags "$ldflags")
done

# --- etcd -----------------------------------------------------------------
ev=${VMLANE_ETCD_VERSION:-}
if [[ -z $ev ]]; then
	# shellcheck disable=SC2016 # the $ is sed's, not ours
	ev=$(sed -n 's/^ETCD_VERSION=\${ETCD_VERSION:-\([0-9][0-9.]*\)}$/v\1/p' "$kdir/hack/lib/etcd.sh" 2>/dev/null || true)
	[[ -n $ev ]] || die "cannot read ETCD_VERSION from $kdir/hack/lib/etcd.sh; set VMLANE_ETCD_VERSION"
fi
log "etcd $ev: downloading go.etcd.io/etcd/server/v3"
edir=$(download "go.etcd.io/etcd/server/v3@$ev")
grep -q '^package main$' "$edir/main.go" || die "$edir/main.go is not package main: where is etcd's main?"

esrc=$cache/src/etcd-$ev
rm -rf "$esrc"
mkdir -p "$esrc"
{
	echo "// Generated by internal/testing/controlplane/build.sh; scratch module, not committed."
	echo "module vmlane.invalid/controlplane/etcd"
	echo
	gomod_directives "$edir/go.mod"
	echo
	echo "require go.etcd.io/etcd/server/v3 $ev"
	echo
	echo "tool go.etcd.io/etcd/server/v3"
} >"$esrc/go.mod"
t0=$SECONDS
(cd "$esrc" && go mod tidy) || die "go mod tidy in $esrc failed"
log "etcd $ev: dependencies resolved in $((SECONDS - t0))s"
(cd "$esrc" && gobuild etcd "$out/etcd" go.etcd.io/etcd/server/v3 -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$ev")

# --- done -----------------------------------------------------------------
{
	echo "KUBERNETES_VERSION=$kv"
	echo "ETCD_VERSION=$ev"
	echo "# The main module's client-go must match the apiserver's release:"
	for m in client-go api apimachinery; do
		name=${m//-/_}
		echo "K8S_IO_${name^^}=$staging_version"
	done
	echo "GO_VERSION=$(go env GOVERSION)"
} >"$out/versions.env"
"$out/kube-apiserver" --version >&2
"$out/kubectl" version --client >&2
"$out/etcd" --version >&2
echo "kubernetes=$kv etcd=$ev recipe=$recipe" >"$out/.stamp.tmp"
mv -f "$out/.stamp.tmp" "$out/.stamp"
log "built $out in $((SECONDS - start))s"
result

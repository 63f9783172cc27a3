#!/usr/bin/env bash
# build.sh [--print-dir] CACHE_DIR CONTROLPLANE_DIR
#
# Builds what Kubernetes' own conformance suite needs to run against a
# vmlane cluster (make conformance, and the subset make test runs), from
# source fetched through the Go module proxy and Debian's packages (no
# release binaries, no image pulls), into
#
#   CACHE_DIR/<kubernetes version>/e2e.test      the upstream suite,
#                                                k8s.io/kubernetes/test/e2e
#   CACHE_DIR/<kubernetes version>/agnhost       its test server,
#                                                test/images/agnhost
#   CACHE_DIR/<kubernetes version>/images/*.tar  the images the network
#                                                tests run, under the names
#                                                e2e.test asks for
#                                                (--list-images)
#   CACHE_DIR/<kubernetes version>/.stamp        written last
#
# CONTROLPLANE_DIR is internal/testing/controlplane/build.sh's output for
# the same release (its versions.env names it), whose scratch module
# (CONTROLPLANE_DIR/../src/kubernetes-VERSION) already requires
# k8s.io/kubernetes with every staging module replaced by its published
# version: e2e.test and agnhost are built in a copy of it, so they share
# its dependency resolution and most of its build cache.
#
# The images: agnhost's on a Debian root with what the tests run inside it
# (curl, dig, nc, ip, iptables: the upstream image is Alpine with the
# same), also serving as glibc-dns-testing; nginx's from the same root
# with Debian's nginx; busybox's from Debian's busybox-static; the pause
# program of internal/tools/imagebuild/pause.
#
# stdout gets the key or, with --print-dir, the absolute output directory.
# Progress goes to stderr. A second run with everything present returns at
# once. After the control plane's build (whose Go build cache e2e.test
# shares) it takes about three minutes cold on two cores: two for
# e2e.test (the rest of its packages and the link), under one for the
# test root. Needs root for the image roots.
#
# Touches nothing outside CACHE_DIR but the Go module and build caches and,
# when debootstrap is missing, apt.
set -euo pipefail

suite=bookworm
# The test root's packages: what the network tests run in agnhost's
# container (framework/network, e2e/network: curl, nc, dig and nslookup,
# ip, iptables for the hostexec pods, ping; socat and iperf as upstream's
# image has them; nginx for the nginx image).
test_pkgs=(curl dnsutils iproute2 iputils-ping netcat-openbsd iptables procps ca-certificates socat iperf nginx-light)
# Bump recipe when the way the binaries or the images are built or packed
# changes, root_recipe when the test root's making does (it rebuilds the
# root, a few minutes).
recipe=3
root_recipe=1

print_dir=0
if [[ ${1:-} == --print-dir ]]; then
	print_dir=1
	shift
fi
if [[ $# -ne 2 ]]; then
	echo "usage: $0 [--print-dir] CACHE_DIR CONTROLPLANE_DIR" >&2
	exit 2
fi
mkdir -p "$1"
cache=$(cd "$1" && pwd)
cp_dir=$(cd "$2" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)

log() { echo "conformance build.sh: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}
[[ -f $cp_dir/versions.env ]] || die "$cp_dir/versions.env is missing: run make controlplane"
kv=$(sed -n 's/^KUBERNETES_VERSION=//p' "$cp_dir/versions.env")
[[ $kv =~ ^v1\.[0-9]+\.[0-9]+$ ]] || die "$cp_dir/versions.env names no KUBERNETES_VERSION"
ksrc=$cp_dir/../src/kubernetes-$kv
[[ -f $ksrc/go.mod ]] || die "$ksrc/go.mod is missing: run make controlplane"
out=$cache/$kv
key="kubernetes=$kv recipe=$recipe pkgs=${test_pkgs[*]} busybox=$(sha256sum /bin/busybox 2>/dev/null | cut -c1-12)"

result() {
	if [[ $print_dir -eq 1 ]]; then
		(cd "$out" && pwd)
	else
		echo "$key"
	fi
}
up_to_date() {
	[[ -f $out/.stamp && $(<"$out/.stamp") == "$key" && -x $out/e2e.test && -x $out/agnhost ]]
}
if up_to_date; then
	result
	exit 0
fi
exec 9>"$cache/.lock"
if ! flock -n 9; then
	log "waiting for another build in $cache"
	flock 9
fi
if up_to_date; then
	result
	exit 0
fi
[[ $(id -u) -eq 0 ]] || die "needs root: debootstrap, and the images' files must be root's"
[[ -x /bin/busybox ]] || die "/bin/busybox is missing: install busybox-static (make deps does)"
command -v go >/dev/null || die "go is not on PATH"
start=$SECONDS
rm -f "$out/.stamp"
mkdir -p "$out/images" "$cache/src"

# unmount_under, remove, debian_root; download, gobuild.
. "$repo/internal/tools/imagebuild/debianroot.sh"
. "$repo/internal/testing/buildlib/gobuild.sh"

# --- e2e.test and agnhost ------------------------------------------------------
src=$cache/src/kubernetes-$kv
if [[ ! -x $out/e2e.test || ! -x $out/agnhost ]]; then
	rm -rf "$src"
	mkdir -p "$src"
	cp "$ksrc/go.mod" "$ksrc/go.sum" "$src/"
	chmod u+w "$src/go.mod" "$src/go.sum"
	export GOWORK=off GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0
	log "kubernetes $kv: the test packages' modules"
	(cd "$src" && go get "k8s.io/kubernetes/test/e2e@$kv" >/dev/null 2>&1) || die "go get k8s.io/kubernetes/test/e2e@$kv"
	(cd "$src" && gobuild agnhost "$out/agnhost" k8s.io/kubernetes/test/images/agnhost -ldflags "-s -w")
	# go test -c, not go build: e2e.test is the package's test binary.
	log "e2e.test: go test -c k8s.io/kubernetes/test/e2e (the longest step, minutes cold)"
	(cd "$src" && gotestc e2e.test "$out/e2e.test" k8s.io/kubernetes/test/e2e -ldflags "-s -w")
fi

# --- the images ----------------------------------------------------------------
# The names the suite asks for, so that each test's pod finds its image
# on the node (nothing can be pulled).
mapfile -t wanted < <("$out/e2e.test" --list-images 2>/dev/null | sort -u)
[[ ${#wanted[@]} -gt 0 ]] || die "e2e.test --list-images printed nothing"
refs() { printf '%s\n' "${wanted[@]}" | grep -E "^registry\.k8s\.io/($1):" || true; }
tags() {
	local r
	for r in "$@"; do printf -- '-tag\n%s\n' "$r"; done
}
imagebuild=$cache/bin/imagebuild
mkdir -p "$cache/bin"
(cd "$repo" && CGO_ENABLED=0 go build -trimpath -o "$imagebuild" ./internal/tools/imagebuild) || die "building imagebuild"

root=$cache/rootfs-test
debian_root "$root" "$suite" "$suite ${test_pkgs[*]} recipe=$root_recipe" "${test_pkgs[@]}"

# glibc-dns-testing is upstream's Debian with dnsutils, which this root
# is too: the DNS tests run their glibc prober in it (and the prober they
# call musl in agnhost, which upstream builds on Alpine and here is the
# same Debian root: musl's resolver goes untested).
mapfile -t agn < <(refs 'e2e-test-images/agnhost|e2e-test-images/jessie-dnsutils|e2e-test-images/glibc-dns-testing')
[[ ${#agn[@]} -gt 0 ]] || die "e2e.test lists no agnhost image"
stage=$cache/stage-agnhost
remove "$stage"
cp -a "$root" "$stage"
rm -f "$stage/.stamp"
# What upstream's test/images/agnhost/Dockerfile puts beside the
# program, which the tests rely on: porter's TLS pair in the working
# directory (the Proxy tests' https ports), /uploads, the agnhost-2 link,
# and a user and a group the image defines.
agnhost_src=$(cd "$ksrc" && GOWORK=off GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' k8s.io/kubernetes)/test/images/agnhost
[[ -f $agnhost_src/porter/localhost.crt ]] || die "$agnhost_src/porter/localhost.crt is missing"
install -m 0755 "$out/agnhost" "$stage/agnhost"
ln -s agnhost "$stage/agnhost-2"
install -m 0644 "$agnhost_src/porter/localhost.crt" "$agnhost_src/porter/localhost.key" "$stage/"
mkdir -p "$stage/uploads"
echo 'user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh' >>"$stage/etc/passwd"
printf '%s\n' 'user-defined-in-image:x:1000:' 'group-defined-in-image:x:50000:user-defined-in-image' >>"$stage/etc/group"
mapfile -t args < <(tags "${agn[@]}")
# The upstream image's default command is pause: the hostexec pods run
# it with no arguments.
"$imagebuild" pack -dir "$stage" "${args[@]}" -entrypoint /agnhost -cmd pause -o "$out/images/agnhost.tar" || die "packing agnhost"
remove "$stage"
log "agnhost.tar: ${agn[*]}"

# nginx: the Endpoints and EndpointSlice conformance tests' pods. Upstream
# is the official nginx image; this is Debian's nginx on the same root,
# serving its default site on port 80 in the foreground.
mapfile -t ngx < <(refs 'e2e-test-images/nginx')
if [[ ${#ngx[@]} -gt 0 ]]; then
	[[ -x $root/usr/sbin/nginx ]] || die "the test root has no /usr/sbin/nginx"
	stage=$cache/stage-nginx
	remove "$stage"
	cp -a "$root" "$stage"
	rm -f "$stage/.stamp"
	mkdir -p "$stage/var/log/nginx"
	mapfile -t args < <(tags "${ngx[@]}")
	"$imagebuild" pack -dir "$stage" "${args[@]}" -entrypoint /usr/sbin/nginx -entrypoint -g -entrypoint 'daemon off;' \
		-o "$out/images/nginx.tar" || die "packing nginx"
	remove "$stage"
	log "nginx.tar: ${ngx[*]}"
fi

mapfile -t bb < <(refs 'e2e-test-images/busybox')
if [[ ${#bb[@]} -gt 0 ]]; then
	stage=$cache/stage-busybox
	remove "$stage"
	mkdir -p "$stage"/{bin,etc,tmp,root}
	chmod 1777 "$stage/tmp"
	install -m 0755 /bin/busybox "$stage/bin/busybox"
	for a in $(/bin/busybox --list); do
		[[ $a == busybox ]] || ln -s busybox "$stage/bin/$a"
	done
	echo 'root:x:0:0:root:/root:/bin/sh' >"$stage/etc/passwd"
	echo 'root:x:0:' >"$stage/etc/group"
	mapfile -t args < <(tags "${bb[@]}")
	"$imagebuild" pack -dir "$stage" "${args[@]}" -entrypoint /bin/sh -o "$out/images/busybox.tar" || die "packing busybox"
	remove "$stage"
	log "busybox.tar: ${bb[*]}"
fi

mapfile -t pz < <(refs 'pause')
if [[ ${#pz[@]} -gt 0 ]]; then
	(cd "$repo" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$cache/bin/pause" ./internal/tools/imagebuild/pause) ||
		die "building pause"
	stage=$cache/stage-pause
	remove "$stage"
	mkdir -p "$stage"
	install -m 0755 "$cache/bin/pause" "$stage/pause"
	mapfile -t args < <(tags "${pz[@]}")
	"$imagebuild" pack -dir "$stage" "${args[@]}" -entrypoint /pause -o "$out/images/pause.tar" || die "packing pause"
	remove "$stage"
	log "pause.tar: ${pz[*]}"
fi

echo "$key" >"$out/.stamp.tmp"
mv -f "$out/.stamp.tmp" "$out/.stamp"
log "built $out in $((SECONDS - start))s"
result

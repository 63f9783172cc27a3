#!/usr/bin/env bash
# build.sh [--print-dir] CACHE_DIR BIN_DIR
#
# Builds, without Docker or a registry, the images the real-node e2e suite
# and `make demo` import into each node's containerd (`make image`), as
# tarballs that `ctr -n k8s.io images import` and `docker load` read:
#
#   CACHE_DIR/vmlane.tar   ghcr.io/vmlane/vmlane:e2e ($VMLANE_IMAGE_TAG):
#                          what the Dockerfile builds: a Debian 12 root
#                          with manifests/image/packages, the entrypoint
#                          manifests/image/entrypoint.sh and the static
#                          vmlane, vmlaned, vmlanectl and portmap (the
#                          reference plugin, which `make build` installs)
#                          from BIN_DIR
#   CACHE_DIR/vmlane-arm64.tar  the same image for linux/arm64, from the
#                          static binaries in BIN_DIR/linux-arm64 (make
#                          build-arm64) and the same Debian packages for
#                          arm64, unpacked without running them (see
#                          foreign_root in debianroot.sh); `make release`
#                          makes the multi-platform index of the two
#   CACHE_DIR/pause.tar    registry.k8s.io/pause:3.10, the sandbox image
#                          (internal/tools/imagebuild/pause)
#   CACHE_DIR/busybox.tar  vmlane.test/busybox:e2e, Debian's busybox-static
#                          with its applets, for the test pods; /lib and
#                          /lib64 point into /usr, so a pod that mounts the
#                          node's /usr runs the node's programs (QEMU)
#   CACHE_DIR/.stamp       the key of all four; written last
#
# The Debian root (debootstrap --variant=minbase from the mirror apt
# uses, or $VMLANE_DEBIAN_MIRROR) is cached in CACHE_DIR/rootfs-KEY, KEY a
# hash of the suite, the package list and the recipe below, and built once
# (about a minute). Each tarball is keyed by a hash of what goes into
# it (the binaries, the entrypoint, the root's key, the tag, the sources of
# imagebuild and pause, this script) and packed again, in seconds, only
# when that changed.
#
# stdout gets the key, or with --print-dir the absolute CACHE_DIR, for
# VMLANE_IMAGE_DIR=$(... --print-dir DIR). Progress goes to stderr. A
# second run with nothing changed returns at once, without the lock or a
# build. Needs root (debootstrap; the image's files are root's) unless it
# is up to date. Touches nothing outside CACHE_DIR but the Go build cache
# and, when debootstrap is missing, apt.
set -euo pipefail

# The Debian release of the root; the Dockerfile's base is debian:12-slim.
suite=bookworm
# Bump when the way the root is made changes, so older roots are rebuilt.
# 2: slimmed as debian:12-slim, without ldconfig's aux-cache; debootstrap in
#    a mount namespace of its own.
recipe=2

print_dir=0
if [[ ${1:-} == --print-dir ]]; then
	print_dir=1
	shift
fi
if [[ $# -ne 2 ]]; then
	echo "usage: $0 [--print-dir] CACHE_DIR BIN_DIR" >&2
	exit 2
fi
[[ -d $2 ]] || {
	echo "build.sh: BIN_DIR $2 is not a folder (make build fills bin/)" >&2
	exit 2
}
mkdir -p "$1"
cache=$(cd "$1" && pwd)
bin=$(cd "$2" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)
tag=${VMLANE_IMAGE_TAG:-e2e}
umask 022

log() { echo "image: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}

# sha prints a short hash of stdin and then of its files' contents.
sha() { cat - "$@" | sha256sum | cut -c1-16; }

binaries=(vmlane vmlaned vmlanectl portmap)
bin_arm64=$bin/linux-arm64
for b in "${binaries[@]}"; do
	[[ -f $bin/$b ]] || die "$bin/$b is missing: run make build"
	[[ -f $bin_arm64/$b ]] || die "$bin_arm64/$b is missing: run make build-arm64"
done
[[ -x /bin/busybox ]] || die "/bin/busybox is missing: install busybox-static (make deps does)"

# --- the keys ----------------------------------------------------------------
[[ -f $repo/manifests/image/packages ]] || die "$repo/manifests/image/packages is missing"
mapfile -t pkgs < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$repo/manifests/image/packages")
[[ ${#pkgs[@]} -gt 0 ]] || die "no packages in manifests/image/packages"
rootkey=$(printf '%s\n' "$suite" "${pkgs[@]}" "recipe=$recipe" | sha)
root=$cache/rootfs-$rootkey
root_arm64=$cache/rootfs-arm64-$rootkey
# What the arm64 root is made of: the native root's packages, unpacked by
# foreign_root, whose recipe is the last word.
root_arm64_stamp="$suite arm64 $rootkey foreign=2"
# imagebuild's sources and this script: a change to either may change
# every image.
shopt -s nullglob
tool_src=()
for f in "$here"/*.go; do
	[[ $f == *_test.go ]] || tool_src+=("$f")
done
tool=$(echo | sha "${tool_src[@]}" "$repo/go.mod" "$repo/go.sum" "$here/build.sh" "$here/debianroot.sh")
goversion=$(go env GOVERSION 2>/dev/null || echo none)
vmlane_key=$(echo "$tool $rootkey $tag" |
	sha "${binaries[@]/#/$bin/}" "$repo/manifests/image/entrypoint.sh")
vmlane_arm64_key=$(echo "$tool $root_arm64_stamp $tag" |
	sha "${binaries[@]/#/$bin_arm64/}" "$repo/manifests/image/entrypoint.sh")
pause_key=$(echo "$tool $goversion" | sha "$here"/pause/*.go)
busybox_key=$(echo "$tool" | sha /bin/busybox)
key="vmlane=$vmlane_key vmlane-arm64=$vmlane_arm64_key pause=$pause_key busybox=$busybox_key"

result() {
	if [[ $print_dir -eq 1 ]]; then
		echo "$cache"
	else
		echo "$key"
	fi
}
up_to_date() {
	[[ -f $cache/.stamp && $(<"$cache/.stamp") == "$key" &&
		-f $cache/vmlane.tar && -f $cache/vmlane-arm64.tar && -f $cache/pause.tar && -f $cache/busybox.tar ]]
}

# Fast path, without the lock: .stamp is written last.
if up_to_date; then
	result
	exit 0
fi

# One build at a time per cache (make -j, two test runs at once); the second
# one waits, then finds the first one's images.
exec 9>"$cache/.lock"
if ! flock -n 9; then
	log "waiting for another build in $cache"
	flock 9
fi
if up_to_date; then
	log "up to date: $cache"
	result
	exit 0
fi
[[ $(id -u) -eq 0 ]] || die "needs root: debootstrap, and the images' files must be root's"
command -v go >/dev/null || die "go is not on PATH"
rm -f "$cache/.stamp"
start=$SECONDS

# unmount_under, remove, debian_root.
. "$here/debianroot.sh"

# Whatever a killed run left (under the lock, so none is in use).
remove "$cache"/stage-* "$cache"/rootfs-*.tmp "$cache"/bin/*.tmp

# --- the Debian root ---------------------------------------------------------
if [[ ! -f $root/.stamp ]]; then
	debian_root "$root" "$suite" "$suite ${pkgs[*]} recipe=$recipe" "${pkgs[@]}"
	[[ -x $root/usr/sbin/iptables-nft && -x $root/usr/bin/update-alternatives ]] || {
		remove "$root"
		die "the root has no iptables-nft or update-alternatives (log: $root.debootstrap.log)"
	}
fi
# The same packages for arm64, unpacked (seconds once downloaded).
foreign_root "$root" "$root_arm64" arm64 "$suite" "$root_arm64_stamp"
# Older roots are of another package list or recipe.
for old in "$cache"/rootfs-*; do
	[[ $old == "$root" || $old == "$root".* || $old == "$root_arm64" || $old == "$root_arm64".* ]] || remove "$old"
done
# --- the tools ---------------------------------------------------------------
mkdir -p "$cache/bin"
imagebuild=$cache/bin/imagebuild
(cd "$repo" && CGO_ENABLED=0 go build -trimpath -o "$imagebuild.tmp" ./internal/tools/imagebuild) || die "building imagebuild"
mv -f "$imagebuild.tmp" "$imagebuild"

# static FILE succeeds when FILE is an ELF program without a program
# interpreter, that is static.
static() {
	local headers
	if command -v readelf >/dev/null; then
		headers=$(LC_ALL=C readelf -l "$1" 2>&1) || return 1 # not ELF
		[[ $headers != *'Requesting program interpreter'* ]]
	elif command -v file >/dev/null; then
		LC_ALL=C file -L "$1" | grep -q 'statically linked'
	else
		die "neither readelf (binutils) nor file is here to tell whether $1 is static"
	fi
}

# pack NAME KEY SUBCOMMAND ARGS... writes CACHE_DIR/NAME.tar with
# `imagebuild SUBCOMMAND ARGS...` unless it was packed from the same KEY;
# NAME.key is written after the tarball.
pack() {
	local name=$1 key=$2 t0=$SECONDS out=$cache/$1.tar
	shift 2
	"$imagebuild" "$@" -o "$out" || die "packing $name"
	echo "$key" >"$cache/$name.key"
	log "$out: $(du -h "$out" | cut -f1) in $((SECONDS - t0))s"
}
packed() {
	[[ -f $cache/$1.tar && $(cat "$cache/$1.key" 2>/dev/null) == "$2" ]] && log "$1.tar up to date"
}

# --- vmlane ------------------------------------------------------------------
if ! packed vmlane "$vmlane_key"; then
	# The plugin runs on the node, under whatever libc (if any) the node
	# has: only static binaries go in. Dynamic ones (a `go build` with
	# cgo) are built again from this tree, static, with make build's flags
	# so that the build cache serves what it can.
	from=$bin
	for b in "${binaries[@]}"; do
		static "$bin/$b" && continue
		log "$bin/$b is not static: building static copies (make build makes them static)"
		from=$cache/bin/static
		(cd "$repo" && CGO_ENABLED=0 go build -o "$from/" ./cmd/vmlane ./cmd/vmlaned ./cmd/vmlanectl) ||
			die "building static vmlane, vmlaned and vmlanectl"
		break
	done
	stage=$cache/stage-vmlane
	cp -a "$root" "$stage"
	rm -f "$stage/.stamp"
	install -m 0755 "$repo/manifests/image/entrypoint.sh" "$stage/usr/local/bin/vmlane-entrypoint"
	install -m 0755 "${binaries[@]/#/$from/}" "$stage/usr/local/bin/"
	pack vmlane "$vmlane_key" pack -dir "$stage" -tag "ghcr.io/vmlane/vmlane:$tag" \
		-entrypoint /usr/local/bin/vmlane-entrypoint -cmd vmlaned
	remove "$stage"
fi

# --- vmlane for arm64 ----------------------------------------------------------
if ! packed vmlane-arm64 "$vmlane_arm64_key"; then
	for b in "${binaries[@]}"; do
		static "$bin_arm64/$b" || die "$bin_arm64/$b is not static (make build-arm64 builds it so)"
	done
	stage=$cache/stage-vmlane-arm64
	cp -a "$root_arm64" "$stage"
	rm -f "$stage/.stamp"
	install -m 0755 "$repo/manifests/image/entrypoint.sh" "$stage/usr/local/bin/vmlane-entrypoint"
	install -m 0755 "${binaries[@]/#/$bin_arm64/}" "$stage/usr/local/bin/"
	pack vmlane-arm64 "$vmlane_arm64_key" pack -dir "$stage" -tag "ghcr.io/vmlane/vmlane:$tag" -arch arm64 \
		-entrypoint /usr/local/bin/vmlane-entrypoint -cmd vmlaned
	remove "$stage"
fi

# --- pause -------------------------------------------------------------------
if ! packed pause "$pause_key"; then
	(cd "$repo" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$cache/bin/pause" ./internal/tools/imagebuild/pause) ||
		die "building pause"
	pack pause "$pause_key" pause -bin "$cache/bin/pause" -tag registry.k8s.io/pause:3.10
fi

# --- busybox -----------------------------------------------------------------
if ! packed busybox "$busybox_key"; then
	static /bin/busybox || die "/bin/busybox is not static: install busybox-static, not busybox"
	stage=$cache/stage-busybox
	mkdir -p "$stage"/{bin,etc,usr,tmp,root,www}
	chmod 1777 "$stage/tmp"
	chmod 0700 "$stage/root"
	install -m 0755 /bin/busybox "$stage/bin/busybox"
	for a in $(/bin/busybox --list); do
		[[ $a == busybox ]] || ln -s busybox "$stage/bin/$a"
	done
	# The node's /usr, mounted read-only at /usr, brings its programs and
	# their libraries; the dynamic loader is /lib64/ld-linux-x86-64.so.2.
	ln -s usr/lib "$stage/lib"
	ln -s usr/lib64 "$stage/lib64"
	echo 'root:x:0:0:root:/root:/bin/sh' >"$stage/etc/passwd"
	echo 'root:x:0:' >"$stage/etc/group"
	pack busybox "$busybox_key" pack -dir "$stage" -tag vmlane.test/busybox:e2e -entrypoint /bin/sh
	remove "$stage"
fi

echo "$key" >"$cache/.stamp.tmp"
mv -f "$cache/.stamp.tmp" "$cache/.stamp"
log "images in $cache, $((SECONDS - start))s"
result

#!/usr/bin/env bash
# build.sh [--print-dir] CACHE_DIR BIN_DIR
#
# Builds, without Docker or a registry, the images the real-node e2e suite
# and `make demo` import into each node's containerd (`make image`):
#
#   CACHE_DIR/vmlane.tar   ghcr.io/vmlane/vmlane:e2e ($VMLANE_IMAGE_TAG):
#                          what the Dockerfile builds: a Debian 12 root
#                          with manifests/image/packages, the entrypoint
#                          manifests/image/entrypoint.sh and the static
#                          vmlane, vmlaned and vmlanectl from BIN_DIR
#   CACHE_DIR/pause.tar    registry.k8s.io/pause:3.10, the sandbox image
#                          (internal/imagebuild/pause)
#   CACHE_DIR/busybox.tar  vmlane.test/busybox:e2e, Debian's busybox-static
#                          with its applets, for the test pods; /lib and
#                          /lib64 point into /usr, so a pod that mounts the
#                          node's /usr runs the node's programs (QEMU)
#
# The Debian root (debootstrap --variant=minbase from the mirror apt
# uses) is cached in CACHE_DIR/rootfs-KEY, KEY a hash of the suite and the
# package list, and built once (about half a minute); the tarballs are
# packed again only when what goes into them changed. Progress goes to
# stderr; stdout gets CACHE_DIR's absolute path with --print-dir.
# Needs root (debootstrap).
set -euo pipefail

print_dir=0
if [[ ${1:-} == --print-dir ]]; then
	print_dir=1
	shift
fi
if [[ $# -ne 2 ]]; then
	echo "usage: $0 [--print-dir] CACHE_DIR BIN_DIR" >&2
	exit 2
fi
mkdir -p "$1"
cache=$(cd "$1" && pwd)
bin=$(cd "$2" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
tag=${VMLANE_IMAGE_TAG:-e2e}
suite=bookworm
# Bump when the way the root is made changes.
recipe=1

log() { echo "image: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}

exec 9>"$cache/.lock"
flock 9

# sha prints a short hash of its input files' contents and of stdin.
sha() { cat - "$@" | sha256sum | cut -c1-16; }

# --- the Debian root ---------------------------------------------------------
mapfile -t pkgs < <(grep -v '^[[:space:]]*#' "$repo/manifests/image/packages" | sed '/^[[:space:]]*$/d')
[[ ${#pkgs[@]} -gt 0 ]] || die "no packages in manifests/image/packages"
rootkey=$(printf '%s\n' "$suite" "${pkgs[@]}" "recipe=$recipe" | sha)
root=$cache/rootfs-$rootkey
if [[ ! -f $root/.stamp ]]; then
	command -v debootstrap >/dev/null || die "debootstrap is missing (make deps installs it)"
	# The mirror apt on this machine uses (deb822 or one-line format).
	mirror=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\/debian\)[[:space:]]*$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1 || true)
	[[ -n $mirror ]] || mirror=$(awk '$1 == "deb" && $2 ~ /\/debian\/?$/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
	[[ -n $mirror ]] || mirror=http://deb.debian.org/debian
	log "debootstrap $suite (minbase + ${pkgs[*]}) from $mirror"
	rm -rf "$root" "$root.tmp"
	t0=$SECONDS
	# debootstrap mounts /proc and /sys in the target while it works;
	# whatever happens, nothing stays mounted.
	trap 'umount -R "$root.tmp/proc" "$root.tmp/sys" 2>/dev/null || true' EXIT
	if ! debootstrap --variant=minbase --include="$(
		IFS=,
		echo "${pkgs[*]}"
	)" "$suite" "$root.tmp" "$mirror" >"$cache/debootstrap.log" 2>&1; then
		tail -n 20 "$cache/debootstrap.log" >&2
		die "debootstrap failed (log: $cache/debootstrap.log)"
	fi
	umount -R "$root.tmp/proc" "$root.tmp/sys" 2>/dev/null || true
	trap - EXIT
	# As the Dockerfile's apt-get: no package lists or caches in the image.
	rm -rf "$root.tmp"/var/lib/apt/lists/* "$root.tmp"/var/cache/apt/*.bin "$root.tmp"/var/cache/apt/archives/*.deb "$root.tmp"/var/log/*
	touch "$root.tmp/.stamp"
	mv "$root.tmp" "$root"
	log "root built in $((SECONDS - t0))s"
	# Older roots are of another package list.
	for old in "$cache"/rootfs-*; do
		[[ $old == "$root" ]] || rm -rf "$old"
	done
fi

imagebuild=$cache/bin/imagebuild
(cd "$repo" && CGO_ENABLED=0 go build -trimpath -o "$imagebuild" ./internal/imagebuild) || die "building imagebuild"

# pack NAME KEY ARGS... writes CACHE_DIR/NAME.tar unless it was packed from
# the same KEY.
pack() {
	local name=$1 key=$2 t0=$SECONDS
	shift 2
	if [[ -f $cache/$name.tar && $(cat "$cache/$name.key" 2>/dev/null) == "$key" ]]; then
		log "$name.tar up to date"
		return
	fi
	"$imagebuild" -o "$cache/$name.tar" "$@" || die "packing $name"
	echo "$key" >"$cache/$name.key"
	log "$name.tar: $(du -h "$cache/$name.tar" | cut -f1) in $((SECONDS - t0))s"
}

# static BIN fails unless BIN has no program interpreter: the plugin runs
# on the node, under whatever libc the node has.
static() {
	if LC_ALL=C readelf -l "$1" 2>/dev/null | grep -q 'Requesting program interpreter'; then
		die "$1 is not static: build it with CGO_ENABLED=0 (make build does)"
	fi
}

# --- vmlane ------------------------------------------------------------------
stage=$cache/stage-vmlane
for b in vmlane vmlaned vmlanectl; do
	[[ -x $bin/$b ]] || die "$bin/$b is missing: run make build"
	static "$bin/$b"
done
key=$( (
	echo "$rootkey $tag"
	cat "$bin/vmlane" "$bin/vmlaned" "$bin/vmlanectl" "$repo/manifests/image/entrypoint.sh"
) | sha)
if [[ ! -f $cache/vmlane.tar || $(cat "$cache/vmlane.key" 2>/dev/null) != "$key" ]]; then
	rm -rf "$stage"
	cp -a "$root" "$stage"
	rm -f "$stage/.stamp"
	install -m 0755 "$repo/manifests/image/entrypoint.sh" "$stage/usr/local/bin/vmlane-entrypoint"
	install -m 0755 "$bin/vmlane" "$bin/vmlaned" "$bin/vmlanectl" "$stage/usr/local/bin/"
	pack vmlane "$key" -dir "$stage" -tag "ghcr.io/vmlane/vmlane:$tag" \
		-entrypoint /usr/local/bin/vmlane-entrypoint -cmd vmlaned
	rm -rf "$stage"
else
	log "vmlane.tar up to date"
fi

# --- pause -------------------------------------------------------------------
stage=$cache/stage-pause
rm -rf "$stage" && mkdir -p "$stage"
(cd "$repo" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$stage/pause" ./internal/imagebuild/pause) || die "building pause"
pack pause "$(sha "$stage/pause" </dev/null)" -dir "$stage" -tag registry.k8s.io/pause:3.10 -entrypoint /pause
rm -rf "$stage"

# --- busybox -----------------------------------------------------------------
bb=/bin/busybox
[[ -x $bb ]] || die "$bb is missing: install busybox-static (make deps does)"
key=$(echo "busybox recipe=$recipe" | sha "$bb")
if [[ ! -f $cache/busybox.tar || $(cat "$cache/busybox.key" 2>/dev/null) != "$key" ]]; then
	stage=$cache/stage-busybox
	rm -rf "$stage" && mkdir -p "$stage"/{bin,etc,usr,tmp,root,www}
	chmod 1777 "$stage/tmp"
	cp "$bb" "$stage/bin/busybox"
	for a in $("$bb" --list); do
		[[ $a == busybox ]] || ln -s busybox "$stage/bin/$a"
	done
	ln -s usr/lib "$stage/lib"
	ln -s usr/lib64 "$stage/lib64"
	echo 'root:x:0:0:root:/root:/bin/sh' >"$stage/etc/passwd"
	echo 'root:x:0:' >"$stage/etc/group"
	pack busybox "$key" -dir "$stage" -tag vmlane.test/busybox:e2e -entrypoint /bin/sh
	rm -rf "$stage"
fi

if [[ $print_dir -eq 1 ]]; then
	echo "$cache"
fi

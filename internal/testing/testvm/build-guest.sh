#!/usr/bin/env bash
# build-guest.sh [--print-dir] OUTDIR
#
# Builds the tiny QEMU test guest used by vmlane's privileged and e2e tests:
# a Debian kernel plus a busybox initramfs whose /init configures eth0 from
# the kernel command line (see guest/init), into
#
#   OUTDIR/vmlinuz      the Debian kernel, unpacked from its .deb (not installed)
#   OUTDIR/vmlinux      the same kernel as a plain ELF, for faster PVH boot
#                       (absent if it could not be extracted; vmlinuz works too)
#   OUTDIR/initrd.img   gzip'd cpio newc: busybox-static, virtio-net and ipv6
#                       modules, /init, the CGI /www/cgi-bin/whoami, and a
#                       busybox with udhcpc6 (build-udhcpc6.sh, cached in
#                       OUTDIR/../udhcpc6: Debian's busybox has none)
#   OUTDIR/.stamp       the build key; written last, so its presence means "complete"
#
# The key (printed on stdout; with --print-dir the absolute OUTDIR is printed
# instead, after building) is the versioned kernel package and version
# plus a hash of this script, of guest/* and of the udhcpc6 build's key. A second run returns at once
# when OUTDIR holds a complete build of the same scripts; an edited init
# rebuilds, and VMLANE_GUEST_REFRESH=1 also picks up a newer kernel. The unpacked
# kernel (vmlinuz and the few modules we need) is kept in OUTDIR/kernel/, so
# editing only the init script does not download the kernel again.
#
# Needs root only to apt-get install missing packages. Touches nothing
# outside OUTDIR and a temporary directory it removes on exit.
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
out=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/vmlane-guest.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

log() { echo "build-guest: $*" >&2; }
# result prints what the caller asked for on stdout: the build key, or with
# --print-dir the absolute OUTDIR, for VMLANE_GUEST_DIR=$(... --print-dir DIR).
result() {
	if [[ $print_dir -eq 1 ]]; then
		(cd "$out" && pwd)
	else
		echo "$key"
	fi
}
die() {
	log "error: $*"
	exit 1
}

# Packages the build (cpio, busybox-static) and the tests (qemu, ip, nsenter)
# need. dpkg -s first, so the cached path costs no apt call.
need_pkgs=(qemu-system-x86 busybox-static cpio kmod xz-utils iproute2 util-linux)

# quietly runs an apt command, showing its output only when it fails.
quietly() {
	if ! "$@" >"$tmp/apt.log" 2>&1; then
		cat "$tmp/apt.log" >&2
		return 1
	fi
}

apt_updated=0
apt_update_once() {
	if [[ $apt_updated -eq 0 ]]; then
		log "apt-get update"
		quietly apt-get update
		apt_updated=1
	fi
}

ensure_pkgs() {
	local missing=() p
	for p in "${need_pkgs[@]}"; do
		dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
	done
	[[ ${#missing[@]} -eq 0 ]] && return 0
	[[ $(id -u) -eq 0 ]] || die "missing packages ${missing[*]}; run as root or apt-get install them"
	log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	# A fresh machine may have no (or stale) apt lists: update once and retry.
	if ! quietly apt-get install -y --no-install-recommends "${missing[@]}"; then
		apt_update_once
		quietly apt-get install -y --no-install-recommends "${missing[@]}"
	fi
}

# kernel_pkg prints "NAME VERSION" of the real, versioned kernel package that
# the linux-image-amd64 metapackage points at (e.g. linux-image-6.1.0-56-amd64).
# The metapackage itself holds no files, so there is no point downloading it.
kernel_pkg() {
	local name ver
	name=$(apt-cache depends linux-image-amd64 2>/dev/null |
		awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9].*-amd64$/ { print $2; exit }')
	if [[ -z $name ]]; then
		apt_update_once
		name=$(apt-cache depends linux-image-amd64 |
			awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9].*-amd64$/ { print $2; exit }')
	fi
	[[ -n $name ]] || die "cannot resolve linux-image-amd64 to a versioned kernel package"
	ver=$(apt-cache policy "$name" | awk '$1 == "Candidate:" { print $2; exit }')
	[[ -n $ver && $ver != "(none)" ]] || die "no candidate version for $name"
	echo "$name $ver"
}

# The virtio-net-pci NIC needs these; which ones are modules and which are
# built in depends on the kernel config, so we ask modules.builtin/modules.dep.
want_mods=(virtio virtio_ring virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci failover net_failover virtio_net ipv6)

# extract_vmlinux BZIMAGE OUT unpacks the ELF kernel inside a bzImage.
# QEMU boots an ELF kernel with a PVH note (CONFIG_PVH, set in Debian's
# kernels) directly in 32-bit mode: no SeaBIOS real-mode loader and no
# in-guest decompression, which under TCG saves about 2 of ~5 seconds.
extract_vmlinux() {
	local img=$1 dst=$2 magic tool off
	for magic in 'xz:\xfd7zXZ\x00' 'zstd:\x28\xb5\x2f\xfd' 'gzip:\x1f\x8b\x08'; do
		tool=${magic%%:*}
		command -v "$tool" >/dev/null || continue
		# shellcheck disable=SC2013 # one number per line
		for off in $(LC_ALL=C grep -obUaP "${magic#*:}" "$img" | cut -d: -f1); do
			# Trailing data after the payload makes the tools complain; the
			# ELF magic check below is what decides.
			tail -c +$((off + 1)) "$img" | "$tool" -dc >"$dst.tmp" 2>/dev/null || true
			if [[ -s $dst.tmp && $(head -c 4 "$dst.tmp" | od -An -c | tr -d ' ') == '177ELF' ]]; then
				mv "$dst.tmp" "$dst"
				return 0
			fi
		done
	done
	rm -f "$dst.tmp"
	return 1
}

ensure_pkgs

# One build at a time per OUTDIR (make -j, two test runs at once).
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9

# The DHCPv6 client, built once for the tests and the guest alike.
udhcpc6=$(bash "$here/build-udhcpc6.sh" --print-dir "$out/../udhcpc6")

shopt -s nullglob
hash=$(cat "$here/build-guest.sh" "$here"/guest/* "${udhcpc6%/*}/.stamp" | sha256sum | cut -c1-12)

# Fast path without asking apt (which costs ~1.5 s): a complete build of
# these scripts is reused whatever kernel it has. A newer kernel in the apt
# lists is picked up with VMLANE_GUEST_REFRESH=1 or by removing OUTDIR.
if [[ -z ${VMLANE_GUEST_REFRESH:-} && -f $out/.stamp && -f $out/vmlinuz && -f $out/initrd.img ]]; then
	key=$(<"$out/.stamp")
	if [[ $key == *_"$hash" ]]; then
		log "up to date: $out ($key)"
		result
		exit 0
	fi
fi

# Not `read < <(kernel_pkg)`: a failure in there must stop the script.
kinfo=$(kernel_pkg)
read -r kpkg kver <<<"$kinfo"
key="${kpkg}_${kver}_${hash}"

rm -f "$out/.stamp"

# Stage 1: the kernel and its modules, kept across init-only rebuilds.
kdir=$out/kernel
kstamp="${kpkg}_${kver} ${want_mods[*]}"
if [[ ! -f $kdir/.stamp || $(<"$kdir/.stamp") != "$kstamp" ]]; then
	rm -rf "$kdir"
	log "downloading $kpkg $kver"
	# apt's _apt user must be able to write the download dir, or apt warns.
	chown _apt "$tmp" 2>/dev/null || true
	(cd "$tmp" && quietly apt-get download "$kpkg=$kver") || {
		apt_update_once
		(cd "$tmp" && quietly apt-get download "$kpkg=$kver")
	}
	deb=("$tmp"/*.deb)
	[[ ${#deb[@]} -eq 1 ]] || die "expected one .deb in $tmp, got ${#deb[*]}"
	dpkg-deb -x "${deb[0]}" "$tmp/root"
	rm -f "${deb[0]}"

	vmlinuz=("$tmp"/root/boot/vmlinuz-*)
	[[ ${#vmlinuz[@]} -eq 1 ]] || die "expected one boot/vmlinuz-* in $kpkg"
	krel=${vmlinuz[0]##*/vmlinuz-}
	moddir=$tmp/root/lib/modules/$krel
	[[ -f $moddir/modules.builtin ]] || die "no lib/modules/$krel/modules.builtin in $kpkg"
	# The package ships no modules.dep (its postinst runs depmod): make one.
	depmod -b "$tmp/root" "$krel"

	mkdir -p "$kdir/modules"
	cp "${vmlinuz[0]}" "$kdir/vmlinuz"
	extract_vmlinux "$kdir/vmlinuz" "$kdir/vmlinux" ||
		log "warning: could not extract vmlinux from vmlinuz; the guest boots the slower bzImage"
	cp "$moddir/modules.builtin" "$moddir/modules.dep" "$kdir/"
	echo "$krel" >"$kdir/release"

	# Resolve want_mods to the loadable modules in dependency order: a
	# depth-first walk over modules.dep, dependencies before dependents.
	declare -A seen=()
	order=()
	visit() {
		local name=$1 line path deps d
		[[ -n ${seen[$name]:-} ]] && return 0
		seen[$name]=1
		if grep -qE "/${name}\.ko(\.[a-z]+)?$" "$moddir/modules.builtin"; then
			log "module $name: built in"
			return 0
		fi
		line=$(grep -E "(^|/)${name}\.ko(\.[a-z]+)?:" "$moddir/modules.dep" || true)
		if [[ -z $line ]]; then
			log "module $name: neither built in nor a module (not in this kernel?)"
			return 0
		fi
		path=${line%%:*}
		deps=${line#*:}
		for d in $deps; do
			d=${d##*/}
			visit "${d%%.ko*}"
		done
		order+=("$path")
		log "module $name: $path"
	}
	for m in "${want_mods[@]}"; do
		# modules.dep spells names with '-' or '_' as the file has them.
		visit "$m"
	done

	: >"$kdir/modules.order"
	for path in "${order[@]}"; do
		base=${path##*/}
		src=$moddir/$path
		# busybox insmod cannot read compressed modules: store them plain.
		case $base in
		*.ko.xz) xz -dc "$src" >"$kdir/modules/${base%.xz}" ;;
		*.ko.zst) zstd -qdc "$src" >"$kdir/modules/${base%.zst}" ;;
		*.ko.gz) gzip -dc "$src" >"$kdir/modules/${base%.gz}" ;;
		*.ko) cp "$src" "$kdir/modules/$base" ;;
		*) die "unexpected module file $path" ;;
		esac
		echo "${base%.ko*}.ko" >>"$kdir/modules.order"
	done
	rm -rf "$tmp/root"
	echo "$kstamp" >"$kdir/.stamp"
fi

# Stage 2: the initramfs.
root=$tmp/initramfs
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,dev,proc,sys,tmp,run,etc,lib/modules}
cp /bin/busybox "$root/bin/busybox"
# Applet symlinks at build time rather than `busybox --install` at boot: one
# less thing to do under TCG, and the image lists exactly what it has.
while read -r applet; do
	[[ $applet == bin/busybox || -e $root/$applet ]] && continue
	# --list-full gives bin/ls, usr/sbin/udhcpd... and a bare "linuxrc".
	[[ $applet == */* && ! -d $root/${applet%/*} ]] && mkdir -p "$root/${applet%/*}"
	ln -s /bin/busybox "$root/$applet"
done < <(/bin/busybox --list-full)
for tool in ip udhcpc ping insmod poweroff httpd wget timeout stty; do
	[[ -e $root/bin/$tool || -e $root/sbin/$tool || -e $root/usr/bin/$tool || -e $root/usr/sbin/$tool ]] ||
		die "busybox-static has no $tool applet"
done
cp "$kdir"/modules/*.ko "$root/lib/modules/" 2>/dev/null || true
cp "$kdir/modules.order" "$root/lib/modules/modules.order"
install -m 0755 "$here/guest/init" "$root/init"
install -m 0755 "$here/guest/udhcpc.script" "$root/etc/udhcpc.script"
install -m 0755 "$here/guest/udhcpc6.script" "$root/etc/udhcpc6.script"
install -m 0755 "$udhcpc6" "$root/bin/busybox6"
# A held guest serves this CGI with busybox httpd -h /www.
install -D -m 0755 "$here/guest/whoami" "$root/www/cgi-bin/whoami"
echo "$key" >"$root/etc/vmlane-guest"

# Reproducible archive: fixed mtimes, sorted names, no owner from the host.
find "$root" -exec touch -h -d @0 {} +
(cd "$root" && find . -print0 | LC_ALL=C sort -z |
	cpio --null --create --format=newc --owner=0:0 --reproducible --quiet) |
	gzip -n -9 >"$tmp/initrd.img"

ln -f "$kdir/vmlinuz" "$out/vmlinuz"
if [[ -f $kdir/vmlinux ]]; then
	ln -f "$kdir/vmlinux" "$out/vmlinux"
else
	rm -f "$out/vmlinux"
fi
mv -f "$tmp/initrd.img" "$out/initrd.img"
echo "$key" >"$out/.stamp"
log "built $out ($key, kernel $(<"$kdir/release"), initrd $(stat -c %s "$out/initrd.img") bytes)"
result

# debianroot.sh: the Debian roots of the images vmlane builds without
# Docker, shared by internal/tools/imagebuild/build.sh (vmlane's image) and
# internal/testing/conformance/build.sh (the e2e test images). Sourced,
# not run. The sourcing script defines log and die, and sets cache (its
# CACHE_DIR) before calling these.

# unmount_under DIR unmounts whatever is mounted at or below DIR in this
# mount namespace, deepest first, so that rm -rf never walks into a
# mounted /proc, /sys or /dev.
unmount_under() {
	local m
	awk -v d="$1" '$5 == d || index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r |
		while read -r m; do
			umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "warning: cannot unmount $m"
		done
}

# remove DIR... removes folders of the caller's, on this file system only.
remove() {
	local d
	for d in "$@"; do
		[[ -e $d ]] || continue
		unmount_under "$d"
		rm -rf --one-file-system "$d"
	done
}

# apt_mirror SUITE prints the Debian mirror apt on this machine uses for
# SUITE: the first URI of a deb822 stanza (sources.list.d/*.sources) or a
# one-line entry (sources.list, *.list) that names the suite itself, else
# the first one whose path ends in /debian.
apt_mirror() {
	local suite=$1
	local srcs=(/etc/apt/sources.list.d/*.sources) lists=(/etc/apt/sources.list /etc/apt/sources.list.d/*.list)
	local found=() f
	for f in "${lists[@]}"; do [[ -r $f ]] && found+=("$f"); done
	lists=("${found[@]}")
	{
		[[ ${#srcs[@]} -eq 0 ]] || awk -v suite="$suite" '
			function flush() {
				if (uri != "" && deb && on) print (has ? "1 " : "2 ") uri
				uri = ""; deb = 0; has = 0; on = 1
			}
			BEGIN { on = 1 }
			FNR == 1 { flush() }
			/^[[:space:]]*$/ { flush(); next }
			/^[[:space:]]*#/ { next }
			tolower($1) == "types:" { for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1 }
			tolower($1) == "uris:" { uri = $2 }
			tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == suite) has = 1 }
			tolower($1) == "enabled:" && tolower($2) == "no" { on = 0 }
			END { flush() }' "${srcs[@]}"
		[[ ${#lists[@]} -eq 0 ]] || awk -v suite="$suite" '
			$1 == "deb" {
				i = 2
				if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
				print ($(i + 1) == suite ? "1 " : "2 ") $i
			}' "${lists[@]}"
	} | awk '$1 == 1 || $2 ~ /\/debian\/?$/' | grep -E '^[12] (https?|file)://' | sort -s -k1,1 | head -n1 | cut -d' ' -f2
}

# slim ROOT slims a Debian root as debian:12-slim: no documentation but
# the copyright files, no manual pages or translations, no package lists
# or caches, nor ldconfig's aux-cache (which records inodes and times and
# so is the one file two roots of the same packages differ in).
slim() {
	local r=$1
	rm -rf "$r"/var/lib/apt/lists/* "$r"/var/cache/apt/*.bin "$r"/var/cache/apt/archives/*.deb \
		"$r"/var/cache/debconf/*-old "$r"/var/lib/dpkg/*-old "$r"/var/log/* "$r"/var/cache/ldconfig/aux-cache
	cat >"$r/etc/dpkg/dpkg.cfg.d/vmlane-slim" <<-'EOF2'
		# Written by vmlane's internal/tools/imagebuild, as debian:12-slim.
		path-exclude /usr/share/doc/*
		path-include /usr/share/doc/*/copyright
		path-exclude /usr/share/groff/*
		path-exclude /usr/share/info/*
		path-exclude /usr/share/linda/*
		path-exclude /usr/share/lintian/overrides/*
		path-exclude /usr/share/locale/*
		path-include /usr/share/locale/locale.alias
		path-exclude /usr/share/man/*
	EOF2
	find "$r/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
	find "$r/usr/share/doc" -mindepth 1 -depth -type d -empty -delete
	find "$r/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
	rm -rf "$r"/usr/share/{groff,info,linda,man}/* "$r"/usr/share/lintian/overrides/*
}

# debian_root ROOT SUITE STAMP PKG... makes ROOT, unless ROOT/.stamp holds
# STAMP: debootstrap --variant=minbase of SUITE with PKG..., from the
# mirror apt uses (or $VMLANE_DEBIAN_MIRROR), slimmed as debian:12-slim
# (no documentation but the copyright files, no manual pages or
# translations, no package lists or caches, nor ldconfig's aux-cache,
# which records inodes and times and so is the one file two roots of the
# same packages differ in). About a minute.
debian_root() {
	local root=$1 suite=$2 stamp=$3 mirror t0 r
	shift 3
	[[ -f $root/.stamp && $(<"$root/.stamp") == "$stamp" ]] && return 0
	ensure_tool debootstrap debootstrap
	mirror=${VMLANE_DEBIAN_MIRROR:-$(apt_mirror "$suite")}
	mirror=${mirror:-http://deb.debian.org/debian}
	log "debootstrap $suite (minbase + $*) from $mirror, about a minute"
	remove "$root" "$root.tmp"
	t0=$SECONDS
	# debootstrap mounts /proc and /sys in its target while it works. It
	# runs in a mount namespace of its own, so those mounts end with it
	# even when it is killed; the trap is for the rest.
	trap 'unmount_under "$root.tmp"' EXIT
	trap 'exit 130' INT TERM
	if ! unshare --mount --propagation private \
		debootstrap --variant=minbase --include="$(IFS=, && echo "$*")" \
		"$suite" "$root.tmp" "$mirror" >"$root.debootstrap.log" 2>&1; then
		tail -n 20 "$root.debootstrap.log" >&2
		die "debootstrap failed (log: $root.debootstrap.log)"
	fi
	unmount_under "$root.tmp"
	trap - EXIT INT TERM
	r=$root.tmp
	slim "$r"
	echo "$stamp" >"$r/.stamp"
	mv "$r" "$root"
	log "root $root built in $((SECONDS - t0))s: $(du -sh "$root" | cut -f1)"
}

# ensure_tool PROGRAM PACKAGE installs PACKAGE from apt when PROGRAM is
# missing.
ensure_tool() {
	command -v "$1" >/dev/null && return 0
	log "installing $2"
	local out
	export DEBIAN_FRONTEND=noninteractive
	out=$(apt-get update -qq 2>&1 && apt-get install -y -qq --no-install-recommends "$2" 2>&1) ||
		die "installing $2 failed: $out"
}

# foreign_root NATIVE ROOT ARCH SUITE STAMP makes ROOT, unless ROOT/.stamp
# holds STAMP: the packages installed in the native root NATIVE (made by
# debian_root), for ARCH, unpacked and not installed. mmdebstrap's
# extract variant downloads them from the mirror apt uses and unpacks
# them into a merged-/usr tree without running anything of theirs (no
# maintainer scripts, no chroot, no binfmt: the host's kernel settings
# stay as they are). What those scripts would have made is taken from
# NATIVE: every file NATIVE has and ROOT lacks (the users and groups, the
# alternatives' links and database, /bin/sh, debconf's cache), but
# NATIVE's architecture's own (anything under an x86_64-linux-gnu folder,
# the x86-64 loader, ld.so's cache) and dpkg's record of what is
# installed, which would claim NATIVE's architecture. So ROOT has no
# ld.so cache (the loader searches the multiarch folders without one) and
# dpkg in it lists nothing installed. Seconds, then slimmed like NATIVE.
foreign_root() {
	local native=$1 root=$2 arch=$3 suite=$4 stamp=$5 mirror t0 pkgs f
	[[ -f $root/.stamp && $(<"$root/.stamp") == "$stamp" ]] && return 0
	ensure_tool mmdebstrap mmdebstrap
	mirror=${VMLANE_DEBIAN_MIRROR:-$(apt_mirror "$suite")}
	mirror=${mirror:-http://deb.debian.org/debian}
	pkgs=$(awk '/^Package:/ { p = $2 } /^Status: install ok installed/ { print p }' "$native/var/lib/dpkg/status" | sort | paste -sd,)
	[[ -n $pkgs ]] || die "$native/var/lib/dpkg/status lists no installed package"
	log "unpacking the $arch packages of $native ($(tr , '\n' <<<"$pkgs" | wc -l)) from $mirror"
	remove "$root" "$root.tmp"
	t0=$SECONDS
	if ! mmdebstrap --quiet --arch="$arch" --variant=extract --include="$pkgs" \
		--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
		"$suite" "$root.tmp" "$mirror" >"$root.mmdebstrap.log" 2>&1; then
		tail -n 20 "$root.mmdebstrap.log" >&2
		die "mmdebstrap failed (log: $root.mmdebstrap.log)"
	fi
	(cd "$native" && find . -mindepth 1 \( -type d -o -type f -o -type l \) -print0) |
		while IFS= read -r -d '' f; do
			case $f in
			./.stamp | ./etc/ld.so.cache | ./lib64 | ./usr/lib64 | ./usr/lib64/* | *x86_64-linux-gnu* | ./var/lib/dpkg/status* | ./var/lib/dpkg/available | ./var/lib/dpkg/info/*) continue ;;
			esac
			[[ -e $root.tmp/$f || -L $root.tmp/$f ]] && continue
			if [[ -d $native/$f && ! -L $native/$f ]]; then
				# An empty folder a script made (/usr/local/bin).
				install -d -m "$(stat -c %a "$native/$f")" "$root.tmp/$f" || die "making $f"
			else
				(cd "$native" && cp -a --parents "$f" "$root.tmp/") || die "copying $f from $native"
			fi
		done
	slim "$root.tmp"
	echo "$stamp" >"$root.tmp/.stamp"
	mv "$root.tmp" "$root"
	log "root $root built in $((SECONDS - t0))s: $(du -sh "$root" | cut -f1)"
}

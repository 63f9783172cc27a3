# gobuild.sh: shell functions the scripts that build Go programs from the
# module proxy share (internal/testing/controlplane/build.sh,
# internal/testing/realnode/build-flannel.sh). Sourced, not run. The sourcing
# script defines log and die and sets cache (its CACHE_DIR, with a src/
# folder for scratch modules) before calling them.

# download MODULE@VERSION prints the module's directory in the module cache.
download() {
	local json dir
	json=$(cd "$cache/src" && go mod download -json "$1") || die "go mod download $1 failed: $json"
	dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
	[[ -n $dir && -d $dir ]] || die "go mod download $1: no Dir in $json"
	echo "$dir"
}

# gobuild NAME OUTFILE PACKAGE [go build flags...] builds PACKAGE in the
# current directory, printing how far it got every 20 s: a cold build is
# minutes of silence otherwise.
gobuild() {
	local name=$1 dst=$2 pkg=$3 pid t0=$SECONDS rc=0
	shift 3
	go build -v -trimpath -o "$dst.tmp" "$@" "$pkg" 2>"$dst.log" &
	pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		for _ in {1..20}; do
			sleep 1
			kill -0 "$pid" 2>/dev/null || break 2
		done
		log "$name: $(grep -c . "$dst.log" || true) packages compiled, $((SECONDS - t0))s"
	done
	wait "$pid" || rc=$?
	if [[ $rc -ne 0 ]]; then
		tail -n 40 "$dst.log" >&2
		die "building $name failed (full log: $dst.log)"
	fi
	mv -f "$dst.tmp" "$dst"
	rm -f "$dst.log"
	log "$name: built in $((SECONDS - t0))s"
}

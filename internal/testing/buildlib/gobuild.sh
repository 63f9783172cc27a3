# gobuild.sh: shell functions the scripts that build Go programs from the
# module proxy share (internal/testing/controlplane/build.sh,
# internal/testing/realnode/build-flannel.sh,
# internal/testing/conformance/build.sh). Sourced, not run. The sourcing
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
	local name=$1 dst=$2 pkg=$3
	shift 3
	goprogress "$name" "$dst" 'grep -c . "$dst.log"' go build -v -trimpath -o "$dst.tmp" "$@" "$pkg"
}

# gotestc NAME OUTFILE PACKAGE [go test flags...] builds PACKAGE's test
# binary (go test -c), printing how far it got every 20 s as gobuild does.
gotestc() {
	local name=$1 dst=$2 pkg=$3
	shift 3
	# go test -c lists no packages; -x prints each compile it runs.
	goprogress "$name" "$dst" 'grep -c "/compile " "$dst.log"' go test -c -x -trimpath -o "$dst.tmp" "$@" "$pkg"
}

# goprogress NAME OUTFILE COUNT COMMAND... runs COMMAND, which writes
# OUTFILE.tmp and its log to stderr, logging every 20 s the packages COUNT
# (a shell command reading $dst.log) finds compiled; then moves
# OUTFILE.tmp to OUTFILE.
goprogress() {
	local name=$1 dst=$2 count=$3 pid t0=$SECONDS rc=0
	shift 3
	"$@" 2>"$dst.log" &
	pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		for _ in {1..20}; do
			sleep 1
			kill -0 "$pid" 2>/dev/null || break 2
		done
		log "$name: $(eval "$count" || true) packages compiled, $((SECONDS - t0))s"
	done
	wait "$pid" || rc=$?
	if [[ $rc -ne 0 ]]; then
		grep -v '^\(mkdir\|cat\|cd\|echo\|WORK=\|EOF\|/\)' "$dst.log" | tail -n 40 >&2
		die "building $name failed (full log: $dst.log)"
	fi
	mv -f "$dst.tmp" "$dst"
	rm -f "$dst.log"
	log "$name: built in $((SECONDS - t0))s"
}

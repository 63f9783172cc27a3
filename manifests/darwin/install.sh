#!/bin/sh
# Install vmlaned (and vmlanectl) on a macOS node and start it under launchd.
#
#   sudo ./install.sh --kubeconfig ./node.kubeconfig [--node-name NAME] \
#        [--bin DIR] [-- VMLANED-FLAGS...]
#   sudo ./install.sh --uninstall
#
# --kubeconfig  kubeconfig vmlaned uses (it runs outside the cluster); copied
#               to /etc/vmlane/kubeconfig, mode 0600
# --node-name   the node's name as the kubelet registered it (default: this
#               Mac's hostname, lowercased, as the kubelet defaults it: Go's
#               os.Hostname, which is what `hostname` prints)
# --bin DIR     folder holding the darwin vmlaned and vmlanectl binaries
#               (default: the folder of this script, then ./bin)
# after --      more vmlaned flags, e.g. --cluster-cidr 10.244.0.0/16
#
# The binaries go to /usr/local/bin, the daemon's plist to
# /Library/LaunchDaemons/dev.vmlane.vmlaned.plist, its log to
# /var/log/vmlaned.log (vmlaned's --log-file, rotated by newsyslog, which
# sends SIGHUP to the pid in /var/run/vmlaned.pid so vmlaned opens the new
# file; what the Go runtime itself prints, a panic, goes to
# /var/log/vmlaned.stderr.log). Running it again upgrades: the old daemon
# is booted out, and once launchd has let it go the new one bootstrapped.
# --uninstall stops the daemon, runs `vmlanectl teardown` and removes what
# this script installed.
#
# VMLANE_ROOT, when set, is a folder the files are installed under instead
# of / (as DESTDIR is to make install); the paths inside them stay the
# real ones. install_test.go runs the script so, with fake macOS tools.
set -eu

LABEL=dev.vmlane.vmlaned
PLIST=/Library/LaunchDaemons/$LABEL.plist
PREFIX=/usr/local/bin
CONF=/etc/vmlane
HERE=$(cd "$(dirname "$0")" && pwd)

LOG=/var/log/vmlaned.log
PIDFILE=/var/run/vmlaned.pid
NEWSYSLOG=/etc/newsyslog.d/vmlaned.conf
R=${VMLANE_ROOT:-}

die() { echo "install.sh: $*" >&2; exit 1; }

# bootout stops the job and waits until launchd has let it go: a bootstrap
# right after a bootout hits launchd's race ("Bootstrap failed: 5:
# Input/output error") while the old job is still being torn down.
bootout() {
	launchctl bootout system/$LABEL 2>/dev/null || true
	i=0
	while launchctl print system/$LABEL >/dev/null 2>&1; do
		i=$((i + 1))
		[ $i -le 50 ] || die "launchd still has $LABEL 10 s after bootout"
		sleep 0.2
	done
}

# bootstrap loads the plist, retrying the race's error a few times.
bootstrap() {
	i=0
	until out=$(launchctl bootstrap system "$R$PLIST" 2>&1); do
		i=$((i + 1))
		case $out in
		*"Input/output error"* | *"Operation already in progress"*) [ $i -lt 5 ] || die "launchctl bootstrap: $out" ;;
		*) die "launchctl bootstrap: $out" ;;
		esac
		sleep 1
	done
}

[ "$(uname -s)" = Darwin ] || die "this installs vmlane on macOS; Linux nodes use the DaemonSet"
[ "$(id -u)" = 0 ] || die "run as root (sudo): vmlaned is a system daemon"

kubeconfig='' node='' bin='' uninstall=''
while [ $# -gt 0 ]; do
	case $1 in
	--kubeconfig) kubeconfig=${2:?--kubeconfig needs a file}; shift 2 ;;
	--node-name) node=${2:?--node-name needs a name}; shift 2 ;;
	--bin) bin=${2:?--bin needs a folder}; shift 2 ;;
	--uninstall) uninstall=1; shift ;;
	--) shift; break ;;
	*) die "unknown argument $1 (vmlaned flags go after --)" ;;
	esac
done

if [ -n "$uninstall" ]; then
	bootout
	if [ -x "$R$PREFIX/vmlanectl" ]; then
		"$R$PREFIX/vmlanectl" teardown || echo "install.sh: teardown reported errors; see above" >&2
	fi
	rm -f "$R$PLIST" "$R$PREFIX/vmlaned" "$R$PREFIX/vmlanectl" "$R$NEWSYSLOG" "$R$PIDFILE"
	rm -rf "$R$CONF"
	echo "vmlane removed (the logs $LOG and /var/log/vmlaned.stderr.log are kept)"
	exit 0
fi

[ -n "$kubeconfig" ] || die "--kubeconfig is required"
[ -r "$kubeconfig" ] || die "cannot read $kubeconfig"
if [ -z "$node" ]; then
	node=$(hostname | tr '[:upper:]' '[:lower:]')
fi
if [ -z "$bin" ]; then
	if [ -x "$HERE/vmlaned" ]; then bin=$HERE; else bin=./bin; fi
fi
for b in vmlaned vmlanectl; do
	[ -x "$bin/$b" ] || die "no $bin/$b (build it with: GOOS=darwin GOARCH=$(uname -m | sed s/x86_64/amd64/) go build -o $bin/ ./cmd/$b)"
	file "$bin/$b" | grep -q Mach-O || die "$bin/$b is not a macOS binary"
done

install -d -m 0755 "$R$PREFIX"
install -m 0755 "$bin/vmlaned" "$bin/vmlanectl" "$R$PREFIX/"
install -d -m 0700 "$R$CONF"
install -m 0600 "$kubeconfig" "$R$CONF/kubeconfig"

# The plist: the template with the node name, and the command line as one
# JSON array (plutil writes the XML, escaping included).
json_str() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }
args="$(json_str $PREFIX/vmlaned),$(json_str --kubeconfig),$(json_str "$CONF/kubeconfig"),$(json_str --log-file),$(json_str "$LOG"),$(json_str --pid-file),$(json_str "$PIDFILE")"
for arg in "$@"; do
	args="$args,$(json_str "$arg")"
done
tmp=$(mktemp /tmp/$LABEL.XXXXXX)
trap 'rm -f "$tmp"' EXIT
cp "$HERE/$LABEL.plist" "$tmp"
plutil -replace EnvironmentVariables.NODE_NAME -string "$node" "$tmp"
plutil -replace ProgramArguments -json "[$args]" "$tmp"
plutil -lint "$tmp" >/dev/null
install -d -m 0755 "$R$(dirname "$PLIST")"
install -o root -g wheel -m 0644 "$tmp" "$R$PLIST"

# Rotate the log at 10 MB, keeping 5 compressed copies; newsyslog sends
# SIGHUP (signal 1) to the pid in PIDFILE, and vmlaned opens the new file.
install -d -m 0755 "$R$(dirname "$NEWSYSLOG")"
echo "$LOG	644	5	10240	*	J	$PIDFILE	1" >"$R$NEWSYSLOG"

# bootout first so a second run replaces a running daemon with the new
# binary and flags; enable in case someone disabled the label before.
bootout
launchctl enable system/$LABEL
bootstrap
echo "vmlaned started for node $node; log: $LOG; health: curl 127.0.0.1:9465/readyz"

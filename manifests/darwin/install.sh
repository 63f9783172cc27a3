#!/bin/sh
# Install vmlaned (and vmlanectl) on a macOS node and start it under launchd.
#
#   sudo ./install.sh --kubeconfig ./node.kubeconfig [--node-name NAME] \
#        [--bin DIR] [--vmnet-group GROUP] [-- VMLANED-FLAGS...]
#   sudo ./install.sh --uninstall
#
# --kubeconfig  kubeconfig vmlaned uses (it runs outside the cluster); copied
#               to /etc/vmlane/kubeconfig, mode 0600
# --node-name   the node's name as the kubelet registered it (default: this
#               Mac's hostname, lowercased, as the kubelet defaults it: Go's
#               os.Hostname, which is what `hostname` prints)
# --bin DIR     folder holding the darwin vmlaned and vmlanectl binaries
#               (default: the folder of this script, then ./bin)
# --vmnet-group GROUP
#               macOS 26 and later: the group whose members may acquire the
#               pod network from vmlane-vmnet besides root (its --group;
#               default: root only)
# after --      more vmlaned flags, e.g. --cluster-cidr 10.244.0.0/16
#
# The binaries go to /usr/local/bin, the daemon's plist to
# /Library/LaunchDaemons/dev.vmlane.vmlaned.plist, its log to
# /var/log/vmlaned.log (vmlaned's --log-file, rotated by newsyslog, which
# sends SIGHUP to the pid in /var/run/vmlaned.pid so vmlaned opens the new
# file; what the Go runtime itself prints, a panic, goes to
# /var/log/vmlaned.stderr.log). Running it again upgrades: the old daemon
# is booted out, and once launchd has let it go the new one bootstrapped.
#
# On macOS 26 and later (sw_vers) it also installs vmlane-vmnet, which holds
# the node's pod network: signed ad hoc with vmlane-vmnet.entitlements, as
# the LaunchDaemon dev.vmlane.vmnet (its log: /var/log/vmlane-vmnet.log).
# An upgrade restarts it only when its binary or its plist changed, since
# a restart takes the network from running VMs. On macOS 15 and earlier
# vmlaned puts vmnet's shared network on the podCIDR through vmnet's plist,
# and vmlane-vmnet is not installed.
#
# --uninstall stops the daemons, runs `vmlanectl teardown` and removes what
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

VMNET_LABEL=dev.vmlane.vmnet
VMNET_PLIST=/Library/LaunchDaemons/$VMNET_LABEL.plist

LOG=/var/log/vmlaned.log
PIDFILE=/var/run/vmlaned.pid
NEWSYSLOG=/etc/newsyslog.d/vmlaned.conf
R=${VMLANE_ROOT:-}

die() { echo "install.sh: $*" >&2; exit 1; }

# bootout LABEL stops the job and waits until launchd has let it go: a
# bootstrap right after a bootout hits launchd's race ("Bootstrap failed:
# 5: Input/output error") while the old job is still being torn down.
bootout() {
	launchctl bootout "system/$1" 2>/dev/null || true
	i=0
	while launchctl print "system/$1" >/dev/null 2>&1; do
		i=$((i + 1))
		[ $i -le 50 ] || die "launchd still has $1 10 s after bootout"
		sleep 0.2
	done
}

# bootstrap PLIST loads the job, retrying the race's error a few times.
bootstrap() {
	i=0
	until out=$(launchctl bootstrap system "$R$1" 2>&1); do
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

kubeconfig='' node='' bin='' uninstall='' vmnet_group=''
while [ $# -gt 0 ]; do
	case $1 in
	--vmnet-group) vmnet_group=${2:?--vmnet-group needs a group}; shift 2 ;;
	--kubeconfig) kubeconfig=${2:?--kubeconfig needs a file}; shift 2 ;;
	--node-name) node=${2:?--node-name needs a name}; shift 2 ;;
	--bin) bin=${2:?--bin needs a folder}; shift 2 ;;
	--uninstall) uninstall=1; shift ;;
	--) shift; break ;;
	*) die "unknown argument $1 (vmlaned flags go after --)" ;;
	esac
done

if [ -n "$uninstall" ]; then
	bootout $LABEL
	bootout $VMNET_LABEL
	if [ -x "$R$PREFIX/vmlanectl" ]; then
		"$R$PREFIX/vmlanectl" teardown || echo "install.sh: teardown reported errors; see above" >&2
	fi
	rm -f "$R$PLIST" "$R$VMNET_PLIST" "$R$PREFIX/vmlaned" "$R$PREFIX/vmlanectl" "$R$PREFIX/vmlane-vmnet" "$R$NEWSYSLOG" "$R$PIDFILE"
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
# macOS 26 reports itself as 16 to programs built with an older SDK;
# either way, 16 and later take the vmnet_network path.
macos=$(sw_vers -productVersion)
major=${macos%%.*}
[ "$major" -ge 11 ] 2>/dev/null || die "macOS $macos: vmlane needs macOS 11 or later"
programs='vmlaned vmlanectl'
if [ "$major" -ge 16 ]; then
	programs="$programs vmlane-vmnet"
fi
for b in $programs; do
	[ -x "$bin/$b" ] || die "no $bin/$b (build it with: GOOS=darwin GOARCH=$(uname -m | sed s/x86_64/amd64/) go build -o $bin/ ./cmd/$b)"
	file "$bin/$b" | grep -q Mach-O || die "$bin/$b is not a macOS binary"
done

install -d -m 0755 "$R$PREFIX"
install -m 0755 "$bin/vmlaned" "$bin/vmlanectl" "$R$PREFIX/"
tmpdir=$(mktemp -d /tmp/vmlane-install.XXXXXX)
trap 'rm -rf "$tmpdir"' EXIT
# json_str quotes a string for plutil -json.
json_str() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }

# vmlane-vmnet (macOS 26 and later): signed ad hoc with the entitlement
# vmnet's network API wants, started before vmlaned, and restarted only
# when it changed: a restart takes the network from running VMs.
if [ "$major" -ge 16 ]; then
	cp "$bin/vmlane-vmnet" "$tmpdir/vmlane-vmnet"
	codesign -f -s - --entitlements "$HERE/vmlane-vmnet.entitlements" "$tmpdir/vmlane-vmnet"
	cp "$HERE/$VMNET_LABEL.plist" "$tmpdir/vmnet.plist"
	if [ -n "$vmnet_group" ]; then
		plutil -replace ProgramArguments -json "[$(json_str "$PREFIX/vmlane-vmnet"),$(json_str --group),$(json_str "$vmnet_group")]" "$tmpdir/vmnet.plist"
	fi
	plutil -lint "$tmpdir/vmnet.plist" >/dev/null
	if cmp -s "$tmpdir/vmlane-vmnet" "$R$PREFIX/vmlane-vmnet" && cmp -s "$tmpdir/vmnet.plist" "$R$VMNET_PLIST" &&
		launchctl print system/$VMNET_LABEL >/dev/null 2>&1; then
		echo "vmlane-vmnet unchanged and running: left as it is, with the network it holds"
	else
		bootout $VMNET_LABEL
		install -m 0755 "$tmpdir/vmlane-vmnet" "$R$PREFIX/vmlane-vmnet"
		install -d -m 0755 "$R$(dirname "$VMNET_PLIST")"
		install -o root -g wheel -m 0644 "$tmpdir/vmnet.plist" "$R$VMNET_PLIST"
		launchctl enable system/$VMNET_LABEL
		bootstrap "$VMNET_PLIST"
		echo "vmlane-vmnet started: it holds the pod network once vmlaned knows the podCIDR; log: /var/log/vmlane-vmnet.log"
	fi
fi
install -d -m 0700 "$R$CONF"
install -m 0600 "$kubeconfig" "$R$CONF/kubeconfig"

# The plist: the template with the node name, and the command line as one
# JSON array (plutil writes the XML, escaping included).
args="$(json_str $PREFIX/vmlaned),$(json_str --kubeconfig),$(json_str "$CONF/kubeconfig"),$(json_str --log-file),$(json_str "$LOG"),$(json_str --pid-file),$(json_str "$PIDFILE")"
for arg in "$@"; do
	args="$args,$(json_str "$arg")"
done
tmp=$tmpdir/$LABEL.plist
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
bootout $LABEL
launchctl enable system/$LABEL
bootstrap "$PLIST"
echo "vmlaned started for node $node; log: $LOG; health: curl 127.0.0.1:9465/readyz"

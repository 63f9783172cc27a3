package darwin_test

// install.sh runs on a Mac; here it runs under VMLANE_ROOT with fake
// macOS tools first on PATH, each recording its calls, so that what it
// does is tested where vmlane is built: the upgrade path through
// launchd's bootout race, the log files and newsyslog's pid file, and the
// default node name.

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"howett.net/plist"
)

// fakes are the macOS tools install.sh runs, but for plutil, which is this
// test binary (plutil_test.go). launchctl's `print` says the
// job is still there twice after a bootout, and its first bootstrap fails
// as launchd does when it comes too soon ("Bootstrap failed: 5:
// Input/output error").
var fakes = map[string]string{
	"uname":    `echo Darwin`,
	"hostname": `echo MacBook-Pro.local`,
	"file":     `echo "$1: Mach-O 64-bit executable x86_64"`,
	// GNU install knows no wheel group: keep the mode, drop the owner.
	"install": `args=; while [ $# -gt 0 ]; do case $1 in -o|-g) shift 2 ;; *) args="$args '$1'"; shift ;; esac; done; eval "exec /usr/bin/install $args"`,
	// sw_vers: macOS 15 unless the test says otherwise.
	"sw_vers": `echo "${FAKE_MACOS:-15.6.1}"`,
	// codesign -f -s - --entitlements ENT FILE: records the call and
	// marks the file signed with ENT's name.
	"codesign": `d=$(dirname "$0")
echo "codesign $*" >>"$d/calls"
eval "f=\${$#}"
echo "# signed with $(basename "$5")" >>"$f"`,
	"launchctl": `d=$(dirname "$0")
echo "launchctl $*" >>"$d/calls"
label=${2#system/}
case $1 in
bootout) echo 2 >"$d/present-$label"; rm -f "$d/loaded-$label" ;;
print)
	n=$(cat "$d/present-$label" 2>/dev/null || echo 0)
	if [ "$n" -gt 0 ]; then echo $((n - 1)) >"$d/present-$label"; exit 0; fi
	[ -e "$d/loaded-$label" ] || exit 113 ;;
bootstrap)
	label=$(basename "$3" .plist)
	if [ ! -e "$d/bootstrapped-once" ]; then
		touch "$d/bootstrapped-once"
		echo "Bootstrap failed: 5: Input/output error" >&2
		exit 5
	fi
	touch "$d/loaded-$label" ;;
esac`,
}

// fakeMac makes dir/tools (the fake macOS tools, plutil being this test
// binary) and dir/root (VMLANE_ROOT), and returns them.
func fakeMac(t *testing.T, dir string) (tools, root string) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("install.sh checks that it runs as root")
	}
	tools, root = filepath.Join(dir, "tools"), filepath.Join(dir, "root")
	for _, d := range []string{tools, root} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range fakes {
		if err := os.WriteFile(filepath.Join(tools, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, filepath.Join(tools, "plutil")); err != nil {
		t.Fatal(err)
	}
	return tools, root
}

func TestInstall(t *testing.T) {
	dir := t.TempDir()
	tools, root := fakeMac(t, dir)
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"vmlaned", "vmlanectl"} {
		if err := os.WriteFile(filepath.Join(bin, b), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	kc := filepath.Join(dir, "node.kubeconfig")
	os.WriteFile(kc, []byte("apiVersion: v1\n"), 0o600)

	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("sh", append([]string{"install.sh"}, args...)...)
		cmd.Env = append(os.Environ(), "PATH="+tools+":"+os.Getenv("PATH"), "VMLANE_ROOT="+root)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("install.sh %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	out := run("--kubeconfig", kc, "--bin", bin, "--", "--cluster-cidr", "10.244.0.0/16")
	if !strings.Contains(out, "vmlaned started for node macbook-pro.local") {
		t.Errorf("output:\n%s", out)
	}
	read := func(p string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	installed := read("/Library/LaunchDaemons/dev.vmlane.vmlaned.plist")
	if err := checkPlist([]byte(installed)); err != nil {
		t.Fatalf("the installed plist: %v", err)
	}
	var job struct {
		ProgramArguments     []string
		EnvironmentVariables map[string]string
		StandardErrorPath    string
	}
	if _, err := plist.Unmarshal([]byte(installed), &job); err != nil {
		t.Fatal(err)
	}
	wantArgs := []string{"/usr/local/bin/vmlaned", "--kubeconfig", "/etc/vmlane/kubeconfig", "--log-file", "/var/log/vmlaned.log",
		"--pid-file", "/var/run/vmlaned.pid", "--cluster-cidr", "10.244.0.0/16"}
	if !slices.Equal(job.ProgramArguments, wantArgs) {
		t.Errorf("ProgramArguments %q, want %q", job.ProgramArguments, wantArgs)
	}
	if got := job.EnvironmentVariables["NODE_NAME"]; got != "macbook-pro.local" { // the hostname, lowercased, as the kubelet's
		t.Errorf("NODE_NAME %q, want macbook-pro.local", got)
	}
	if job.StandardErrorPath != "/var/log/vmlaned.stderr.log" {
		t.Errorf("StandardErrorPath %q", job.StandardErrorPath)
	}
	if got := read("/etc/newsyslog.d/vmlaned.conf"); got != "/var/log/vmlaned.log\t644\t5\t10240\t*\tJ\t/var/run/vmlaned.pid\t1\n" {
		t.Errorf("newsyslog.d entry %q: want the log rotated with SIGHUP to the pid file", got)
	}
	if fi, err := os.Stat(filepath.Join(root, "/etc/vmlane/kubeconfig")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig: %v, %v", fi, err)
	}
	calls, _ := os.ReadFile(filepath.Join(tools, "calls"))
	want := "launchctl bootout system/dev.vmlane.vmlaned\n" +
		"launchctl print system/dev.vmlane.vmlaned\nlaunchctl print system/dev.vmlane.vmlaned\nlaunchctl print system/dev.vmlane.vmlaned\n" +
		"launchctl enable system/dev.vmlane.vmlaned\n" +
		"launchctl bootstrap system " + root + "/Library/LaunchDaemons/dev.vmlane.vmlaned.plist\n" +
		"launchctl bootstrap system " + root + "/Library/LaunchDaemons/dev.vmlane.vmlaned.plist\n"
	if string(calls) != want {
		t.Errorf("launchctl calls:\n%s\nwant (bootout, wait until the job is gone, bootstrap retried after the race's error):\n%s", calls, want)
	}

	run("--uninstall")
	for _, p := range []string{"/Library/LaunchDaemons/dev.vmlane.vmlaned.plist", "/usr/local/bin/vmlaned", "/etc/vmlane", "/etc/newsyslog.d/vmlaned.conf"} {
		if _, err := os.Stat(filepath.Join(root, p)); !os.IsNotExist(err) {
			t.Errorf("%s left after --uninstall (%v)", p, err)
		}
	}
}

// A release's macOS archive unpacked (internal/tools/release: install.sh,
// the plist and the binaries in one folder) installs from where it is,
// with no --bin and run from another folder.
func TestInstallFromUnpackedArchive(t *testing.T) {
	dir := t.TempDir()
	tools, root := fakeMac(t, dir)
	unpacked := filepath.Join(dir, "vmlane-v0.4.0-darwin-arm64")
	if err := os.MkdirAll(unpacked, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"install.sh", "dev.vmlane.vmlaned.plist"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(unpacked, f), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range []string{"vmlaned", "vmlanectl"} {
		if err := os.WriteFile(filepath.Join(unpacked, b), []byte("#!/bin/sh\n# "+b+" from the archive\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	kc := filepath.Join(dir, "node.kubeconfig")
	os.WriteFile(kc, []byte("apiVersion: v1\n"), 0o600)
	cmd := exec.Command("sh", filepath.Join(unpacked, "install.sh"), "--kubeconfig", kc)
	cmd.Dir = t.TempDir() // not the archive's folder, where ./bin would be looked for
	cmd.Env = append(os.Environ(), "PATH="+tools+":"+os.Getenv("PATH"), "VMLANE_ROOT="+root)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("install.sh from the unpacked archive: %v\n%s", err, out)
	}
	for _, b := range []string{"vmlaned", "vmlanectl"} {
		got, err := os.ReadFile(filepath.Join(root, "usr/local/bin", b))
		if err != nil || !strings.Contains(string(got), b+" from the archive") {
			t.Errorf("/usr/local/bin/%s: %q, %v; want the archive's", b, got, err)
		}
	}
	if err := checkPlistFile(filepath.Join(root, "Library/LaunchDaemons/dev.vmlane.vmlaned.plist")); err != nil {
		t.Errorf("the installed plist: %v", err)
	}
}

func checkPlistFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return checkPlist(b)
}

// TestInstallOn26: on macOS 26 install.sh installs vmlane-vmnet too,
// signed ad hoc with its entitlement, as the LaunchDaemon that answers on
// dev.vmlane.vmnet (with --group when given), started before vmlaned. An
// upgrade leaves it running when it did not change (a restart would take
// the network from running VMs) and restarts it when it did; without its
// binary the install stops; --uninstall removes it.
func TestInstallOn26(t *testing.T) {
	dir := t.TempDir()
	tools, root := fakeMac(t, dir)
	bin := filepath.Join(dir, "bin")
	os.MkdirAll(bin, 0o755)
	for _, b := range []string{"vmlaned", "vmlanectl"} {
		os.WriteFile(filepath.Join(bin, b), []byte("#!/bin/sh\n"), 0o755)
	}
	kc := filepath.Join(dir, "node.kubeconfig")
	os.WriteFile(kc, []byte("apiVersion: v1\n"), 0o600)
	run := func(args ...string) (string, error) {
		t.Helper()
		os.Remove(filepath.Join(tools, "calls"))
		cmd := exec.Command("sh", append([]string{"install.sh"}, args...)...)
		cmd.Env = append(os.Environ(), "PATH="+tools+":"+os.Getenv("PATH"), "VMLANE_ROOT="+root, "FAKE_MACOS=26.1")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	calls := func() string {
		b, _ := os.ReadFile(filepath.Join(tools, "calls"))
		return string(b)
	}
	install := []string{"--kubeconfig", kc, "--bin", bin, "--vmnet-group", "staff"}

	if out, err := run(install...); err == nil || !strings.Contains(out, "no "+bin+"/vmlane-vmnet") {
		t.Fatalf("without vmlane-vmnet on macOS 26: %v\n%s", err, out)
	}
	os.WriteFile(filepath.Join(bin, "vmlane-vmnet"), []byte("#!/bin/sh\n# v1\n"), 0o755)
	if out, err := run(install...); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(root, "usr/local/bin/vmlane-vmnet"))
	if err != nil || !strings.Contains(string(got), "# v1") || !strings.Contains(string(got), "# signed with vmlane-vmnet.entitlements") {
		t.Errorf("installed vmlane-vmnet %q, %v: want the binary, signed with the entitlements", got, err)
	}
	c := calls()
	if !strings.Contains(c, "codesign -f -s - --entitlements "+filepath.Join(mustAbs(t, "."), "vmlane-vmnet.entitlements")) {
		t.Errorf("codesign call missing:\n%s", c)
	}
	if i, j := strings.Index(c, "bootstrap system "+root+"/Library/LaunchDaemons/dev.vmlane.vmnet.plist"),
		strings.Index(c, "bootstrap system "+root+"/Library/LaunchDaemons/dev.vmlane.vmlaned.plist"); i < 0 || j < 0 || i > j {
		t.Errorf("want vmlane-vmnet bootstrapped before vmlaned:\n%s", c)
	}
	plistPath := filepath.Join(root, "Library/LaunchDaemons/dev.vmlane.vmnet.plist")
	data, err := os.ReadFile(plistPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkPlist(data); err != nil {
		t.Fatalf("the installed vmnet plist: %v", err)
	}
	var job struct {
		Label            string
		ProgramArguments []string
		MachServices     map[string]bool
	}
	if _, err := plist.Unmarshal(data, &job); err != nil {
		t.Fatal(err)
	}
	if job.Label != "dev.vmlane.vmnet" || !job.MachServices["dev.vmlane.vmnet"] ||
		!slices.Equal(job.ProgramArguments, []string{"/usr/local/bin/vmlane-vmnet", "--group", "staff"}) {
		t.Errorf("vmnet job %+v", job)
	}

	// Unchanged: left running.
	out, err := run(install...)
	if err != nil || !strings.Contains(out, "vmlane-vmnet unchanged and running") || strings.Contains(calls(), "bootout system/dev.vmlane.vmnet") {
		t.Errorf("upgrade with the same vmlane-vmnet: %v\n%s\n%s", err, out, calls())
	}
	if !strings.Contains(calls(), "bootout system/dev.vmlane.vmlaned") {
		t.Errorf("vmlaned not restarted on upgrade:\n%s", calls())
	}
	// Changed: restarted.
	os.WriteFile(filepath.Join(bin, "vmlane-vmnet"), []byte("#!/bin/sh\n# v2\n"), 0o755)
	if out, err := run(install...); err != nil || !strings.Contains(calls(), "bootout system/dev.vmlane.vmnet") {
		t.Errorf("upgrade with a new vmlane-vmnet: %v\n%s\n%s", err, out, calls())
	}

	if out, err := run("--uninstall"); err != nil {
		t.Fatalf("uninstall: %v\n%s", err, out)
	}
	for _, p := range []string{"Library/LaunchDaemons/dev.vmlane.vmnet.plist", "usr/local/bin/vmlane-vmnet"} {
		if _, err := os.Stat(filepath.Join(root, p)); !os.IsNotExist(err) {
			t.Errorf("%s left after --uninstall (%v)", p, err)
		}
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

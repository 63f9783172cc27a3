package netnstest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vmlane/vmlane/internal/testing/privtest"
)

// Prefix starts the name of every namespace this package makes.
const Prefix = "vmlt-"

// runDir is where `ip netns` keeps named namespaces.
const runDir = "/run/netns"

var seq atomic.Int64

// NS is a named network namespace.
type NS struct {
	Name string
	Path string
}

// New creates a namespace named Prefix+<pid>-<n>-tag, with loopback up, and
// deletes it when t ends. It skips (or fails, see privtest) without root.
func New(t testing.TB, tag string) *NS {
	t.Helper()
	privtest.Require(t, "ip")
	sweepOnce()
	name := fmt.Sprintf("%s%d-%d-%s", Prefix, os.Getpid(), seq.Add(1), tag)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	n := &NS{Name: name, Path: filepath.Join(runDir, name)}
	t.Cleanup(func() { n.Delete() })
	n.MustRun(t, "ip", "link", "set", "lo", "up")
	return n
}

// Delete removes the namespace. Processes still inside keep it alive until
// they exit; links in it go with it.
func (n *NS) Delete() error {
	out, err := exec.Command("ip", "netns", "del", n.Name).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "No such file") {
		return fmt.Errorf("ip netns del %s: %v: %s", n.Name, err, out)
	}
	return nil
}

// Do runs fn on an OS thread switched into the namespace. Programs that fn
// starts (os/exec) inherit it: Go forks from the calling, locked thread.
func (n *NS) Do(fn func() error) error {
	return ns.WithNetNSPath(n.Path, func(ns.NetNS) error { return fn() })
}

// Command returns cmd to run inside the namespace (ip netns exec).
func (n *NS) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// Run runs a command inside the namespace and returns its combined output.
func (n *NS) Run(name string, args ...string) (string, error) {
	out, err := n.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s in %s: %w: %s", name, strings.Join(args, " "), n.Name, err, out)
	}
	return string(out), nil
}

// MustRun is Run that fails t on error.
func (n *NS) MustRun(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := n.Run(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var swept atomic.Bool

// sweepOnce deletes namespaces left by test processes that no longer exist
// (a test binary killed before its cleanups ran). Only names this package
// made, whose pid is dead, are touched.
func sweepOnce() {
	if swept.Swap(true) {
		return
	}
	ents, err := os.ReadDir(runDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if OwnerGone(e.Name()) {
			exec.Command("ip", "netns", "del", e.Name()).Run()
		}
	}
}

// OwnerGone reports whether name is one of this package's names
// (Prefix<pid>-...) whose process no longer exists: what a killed test
// binary left behind. Other harnesses that name what they make the same
// way (e2e/cluster's real nodes, their cgroups and folders) sweep with it
// too.
func OwnerGone(name string) bool {
	rest, ok := strings.CutPrefix(name, Prefix)
	if !ok {
		return false
	}
	pidStr, _, _ := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(pidStr)
	return err == nil && pid != os.Getpid() && syscall.Kill(pid, 0) != nil
}

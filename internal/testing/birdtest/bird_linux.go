// Package birdtest runs Debian's BIRD 2 in a test's network namespace: a
// BGP router for the nodes of the e2e suite and for the speaker's
// benchmark. It is test tooling; nothing of vmlane's imports it.
package birdtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/privtest"
)

// Bird is a running bird.
type Bird struct {
	ns   *netnstest.NS
	sock string
	cmd  *exec.Cmd
	log  string
}

// Start runs bird in ns with config conf (where @LOG@ stands for a log
// file of its own), in a folder of its own, until tb ends, and returns
// once its control socket answers. At the end it is brought down, not
// killed, so that it takes the routes it exported to the kernel along.
func Start(tb testing.TB, ns *netnstest.NS, conf string) *Bird {
	tb.Helper()
	privtest.Require(tb, "bird", "birdc")
	dir := tb.TempDir()
	b := &Bird{ns: ns, sock: filepath.Join(dir, "bird.ctl"), log: filepath.Join(dir, "bird.log")}
	cf := filepath.Join(dir, "bird.conf")
	if err := os.WriteFile(cf, []byte(strings.ReplaceAll(conf, "@LOG@", b.log)), 0o644); err != nil {
		tb.Fatal(err)
	}
	b.cmd = ns.Command("bird", "-f", "-c", cf, "-s", b.sock, "-P", filepath.Join(dir, "bird.pid"))
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out := &strings.Builder{}
	b.cmd.Stdout, b.cmd.Stderr = out, out
	if err := b.cmd.Start(); err != nil {
		tb.Fatalf("starting bird: %v", err)
	}
	tb.Cleanup(func() {
		b.Birdc("down")
		done := make(chan struct{})
		go func() { b.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			b.cmd.Process.Kill()
			<-done
		}
		if tb.Failed() {
			tb.Logf("bird's output:\n%s\nbird's log:\n%s", out.String(), b.Log())
		}
	})
	var last string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		o, err := b.Birdc("show", "status")
		if err == nil && strings.Contains(o, "Daemon is up") {
			return b
		}
		last = o
	}
	tb.Fatalf("bird's control socket did not answer within a minute: %s\n%s", last, out.String())
	return nil
}

// Birdc runs birdc against b and returns its output.
func (b *Bird) Birdc(args ...string) (string, error) {
	return b.ns.Run("birdc", append([]string{"-s", b.sock}, args...)...)
}

// Log returns bird's log so far.
func (b *Bird) Log() string {
	l, _ := os.ReadFile(b.log)
	return string(l)
}

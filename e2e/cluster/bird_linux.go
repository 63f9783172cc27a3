package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmlane/vmlane/internal/netnstest"
	"github.com/vmlane/vmlane/internal/privtest"
)

// Bird is Debian's BIRD 2 running in a namespace (the router's): a fabric
// router that nodes peer with over BGP.
type Bird struct {
	ns   *netnstest.NS
	sock string
	cmd  *exec.Cmd
	log  string
}

// StartBird runs bird in ns with config conf, in a folder of its own, until
// tb ends. Its control socket serves Birdc.
func StartBird(tb testing.TB, ns *netnstest.NS, conf string) *Bird {
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
		// Down, not killed: bird takes the routes it exported out of
		// the router's kernel table as it goes.
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
			l, _ := os.ReadFile(b.log)
			tb.Logf("bird's output:\n%s\nbird's log:\n%s", out.String(), l)
		}
	})
	Eventually(tb, "bird's control socket", func() (bool, string) {
		o, err := b.Birdc("show", "status")
		return err == nil && strings.Contains(o, "Daemon is up"), o
	})
	return b
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

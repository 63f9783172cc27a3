package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPidFileGoneOnFailure: vmlaned stopped by an error (here routes-only
// with a kubeconfig that is not there) still removes its pid file and
// logs why it stopped to its log file: the exit status is returned, not
// os.Exit'ed past the deferred cleanups, so newsyslog cannot later signal
// a recycled pid.
func TestPidFileGoneOnFailure(t *testing.T) {
	dir := t.TempDir()
	pid, logPath := filepath.Join(dir, "run", "vmlaned.pid"), filepath.Join(dir, "vmlaned.log")
	code := vmlaned([]string{"--routes-only", "--node-name", "n1", "--kubeconfig", filepath.Join(dir, "missing"),
		"--health-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--pid-file", pid, "--log-file", logPath})
	if code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	if _, err := os.Stat(pid); !os.IsNotExist(err) {
		t.Errorf("pid file left behind after a failed start: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(pid)); err != nil {
		t.Errorf("the pid file was never written: %v", err)
	}
	b, err := os.ReadFile(logPath)
	if err != nil || !strings.Contains(string(b), "vmlaned stopped") {
		t.Errorf("log file %q (%v), want the reason it stopped", b, err)
	}
}

package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLogFileReopen is log rotation as newsyslog does it: the file is
// renamed, SIGHUP comes, and what vmlaned logs next lands in a new file at
// the path, the old one keeping what came before.
func TestLogFileReopen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "vmlaned.log")
	lf, err := openLogFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	log := slog.New(slog.NewTextHandler(lf, nil))
	log.Info("before rotation")
	if err := os.Rename(path, path+".0"); err != nil {
		t.Fatal(err)
	}
	sig := make(chan os.Signal)
	done := make(chan struct{})
	go func() { reopenOn(sig, lf, log); close(done) }()
	sig <- nil // what signal.Notify would send for SIGHUP
	close(sig)
	<-done
	log.Info("after rotation")
	old, _ := os.ReadFile(path + ".0")
	cur, _ := os.ReadFile(path)
	if !strings.Contains(string(old), "before rotation") || strings.Contains(string(old), "after rotation") {
		t.Errorf("rotated file:\n%s", old)
	}
	if !strings.Contains(string(cur), "log file reopened") || !strings.Contains(string(cur), "after rotation") || strings.Contains(string(cur), "before rotation") {
		t.Errorf("new file:\n%s", cur)
	}
	// A path that cannot be opened keeps the old file in use.
	lf.path = filepath.Join(dir, "missing", "x.log")
	if err := lf.Reopen(); err == nil {
		t.Error("Reopen into a missing folder succeeded")
	}
	if _, err := io.WriteString(lf, "still here\n"); err != nil {
		t.Errorf("write after a failed reopen: %v", err)
	}
}

func TestPidFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "vmlaned.pid")
	if err := writePidFile(path); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if string(b) != strconv.Itoa(os.Getpid())+"\n" {
		t.Errorf("pid file says %q", b)
	}
	removePidFile(path)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("pid file left: %v", err)
	}
	// Another process's pid file is not ours to remove.
	os.WriteFile(path, []byte("1\n"), 0o644)
	removePidFile(path)
	if _, err := os.Stat(path); err != nil {
		t.Errorf("removed another process's pid file: %v", err)
	}
}

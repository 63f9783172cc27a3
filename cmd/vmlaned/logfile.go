package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/vmlane/vmlane/internal/atomicfile"
)

// logFile is --log-file: vmlaned's log, appended to, opened again by
// Reopen. Log rotation (newsyslog on a Mac, logrotate elsewhere) renames
// the file and sends SIGHUP; launchd's StandardOutPath, opened once when
// the job starts, would write on into the renamed file for good.
type logFile struct {
	path string
	mu   sync.Mutex
	f    *os.File
}

func openLogFile(path string) (*logFile, error) {
	l := &logFile{path: path}
	if err := l.Reopen(); err != nil {
		return nil, err
	}
	return l, nil
}

// Write appends p to the file open now.
func (l *logFile) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Write(p)
}

// Reopen opens the path again (a new file, after rotation renamed the old
// one) and closes the file it replaces. On failure the old file stays in
// use.
func (l *logFile) Reopen() error {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("opening log file: %w", err)
	}
	l.mu.Lock()
	old := l.f
	l.f = f
	l.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return nil
}

// Close closes the file.
func (l *logFile) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Close()
}

// reopenOn reopens l on every value of sig (SIGHUP) until sig is closed,
// and says so in log, the line landing in the new file.
func reopenOn(sig <-chan os.Signal, l *logFile, log *slog.Logger) {
	for range sig {
		if err := l.Reopen(); err != nil {
			log.Error("reopening the log file after SIGHUP; still writing to the old one", "file", l.path, "err", err)
			continue
		}
		log.Info("log file reopened (SIGHUP)", "file", l.path)
	}
}

// writePidFile writes this process's pid to path (--pid-file), for the
// log rotator to signal; removePidFile undoes it at exit.
func writePidFile(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)
}

func removePidFile(path string) {
	if b, err := os.ReadFile(path); err == nil && string(b) == strconv.Itoa(os.Getpid())+"\n" {
		os.Remove(path)
	}
}

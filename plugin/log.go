package plugin

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
)

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(s))); err != nil {
		return 0, fmt.Errorf("want debug, info, warn or error")
	}
	return l, nil
}

// newLogger logs to the config's logFile, or stderr: stdout carries the
// CNI result and nothing else. The returned closer closes the file.
func newLogger(c *Config, stderr io.Writer) (*slog.Logger, func()) {
	// On stderr only warnings by default: runtimes copy a plugin's stderr
	// into their own logs. A log file gets the per-attachment info lines.
	level := slog.LevelWarn
	if c != nil && c.LogFile != "" {
		level = slog.LevelInfo
	}
	if c != nil && c.LogLevel != "" {
		level, _ = parseLevel(c.LogLevel) // validated in ParseConfig
	}
	w, closer := stderr, func() {}
	if c != nil && c.LogFile != "" {
		f, err := os.OpenFile(c.LogFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err == nil {
			w, closer = f, func() { f.Close() }
		} else {
			fmt.Fprintf(stderr, "vmlane: opening log file %s: %v; logging to stderr\n", c.LogFile, err)
		}
	}
	h := slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})
	return slog.New(h).With("component", "cni"), closer
}

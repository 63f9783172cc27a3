package main

import (
	"context"
	"log/slog"
	"time"
)

// conflistWatch reports, when it changes, whether another network's config
// sorts before vmlane's in the CNI config folders: the runtime would give
// pods that network instead (kubeadm leftovers, a second CNI's DaemonSet).
// vmlane does not remove another network's file; the operator must. warn
// gets the message (for a log line and an Event), ok the all-clear.
type conflistWatch struct {
	dirs []struct{ dir, name string }
	last map[string]string // dir → the shadowing file last reported
}

func newConflistWatch(c *config) *conflistWatch {
	w := &conflistWatch{last: map[string]string{}}
	w.dirs = append(w.dirs, struct{ dir, name string }{c.CNIConfDir, ConflistName})
	if c.VMCNIConfDir != c.CNIConfDir {
		w.dirs = append(w.dirs, struct{ dir, name string }{c.VMCNIConfDir, VMConflistName})
	}
	return w
}

// check looks once and calls warn for each folder whose first config
// changed to another network's.
func (w *conflistWatch) check(log *slog.Logger, warn func(msg string)) {
	for _, d := range w.dirs {
		other, err := shadowedBy(d.dir, d.name)
		if err != nil {
			log.Warn("reading the CNI config folder", "dir", d.dir, "err", err)
			continue
		}
		if other == w.last[d.dir] {
			continue
		}
		w.last[d.dir] = other
		if other == "" {
			log.Info("vmlane's conflist is the runtime's first again", "dir", d.dir, "file", d.name)
			continue
		}
		msg := "CNI config " + other + " sorts before " + d.name + " in " + d.dir +
			": the container runtime gives pods that network, not vmlane's; remove it (or rename it to sort after " + d.name + ")"
		log.Error(msg)
		warn(msg)
	}
}

// run checks now and every period until ctx ends.
func (w *conflistWatch) run(ctx context.Context, period time.Duration, log *slog.Logger, warn func(msg string)) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		w.check(log, warn)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

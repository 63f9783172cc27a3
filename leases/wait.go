package leases

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"
)

// pollInterval is how often Wait re-reads the file where it has no change
// notification, and, as a safety net, where it has one.
var pollInterval = 200 * time.Millisecond

// watch is watchFile, replaced in tests.
var watch = watchFile

// Wait returns the bound, unexpired lease of mac as soon as one appears in
// the lease file at path (a VM runtime calls it after starting a VM, to learn
// the address the VM got by DHCP). On Linux it wakes on inotify events for
// the lease folder, and polls where it cannot have them (elsewhere, or when
// the node is out of inotify instances or watches). The file need not exist yet. It
// returns ctx's error, joined with the last read error if any, when ctx ends
// first. An empty path is NodePath.
func Wait(ctx context.Context, path, mac string) (Lease, error) {
	if path == "" {
		path = NodePath
	}
	mac, err := NormalizeMAC(mac)
	if err != nil {
		return Lease{}, err
	}
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	// On a node where vmlaned has not started yet the folder may not
	// exist either: poll until it does, then watch it.
	changed, stop, err := watch(path)
	for errors.Is(err, fs.ErrNotExist) {
		select {
		case <-ctx.Done():
			return Lease{}, fmt.Errorf("waiting for a bound lease of %s in %s: %w (folder %s does not exist)", mac, path, ctx.Err(), filepath.Dir(path))
		case <-tick.C:
		}
		changed, stop, err = watch(path)
	}
	if err != nil {
		// No watch to be had (the inotify instance or watch limits of a
		// busy node, say): the ticker alone finds the lease, a poll
		// interval later at worst.
		changed, stop = nil, func() {}
	}
	defer stop()
	var lastErr error
	for {
		// The watch is in place before the first read, so a write that
		// lands between the two is not missed.
		s, err := Read(path)
		switch {
		case err == nil:
			lastErr = nil
			if l, ok := s.ByMAC(mac); ok && l.State == StateBound {
				return l, nil
			}
		case errors.Is(err, fs.ErrNotExist):
			lastErr = nil
		default:
			// bootpd rewrites its file in place, so a read can catch
			// it half-written; try again on the next change.
			lastErr = err
		}
		select {
		case <-ctx.Done():
			return Lease{}, errors.Join(fmt.Errorf("waiting for a bound lease of %s in %s: %w", mac, path, ctx.Err()), lastErr)
		case <-changed:
		case <-tick.C:
		}
	}
}

// Watch reports changes to the lease file at path: the returned channel
// receives (coalesced, never blocking the watcher) whenever a file by that
// name is created, written or renamed into its folder, which is how every
// writer replaces it. A reader that caches a parse of the file re-reads it
// after a receive instead of checking the file on every use. Call stop to
// end the watch. The folder must exist. Off Linux there is no change
// notification: changed is nil (it never fires) and the caller must check
// the file itself.
func Watch(path string) (changed <-chan struct{}, stop func(), err error) {
	changed, stop, err = watchFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("watching %s: %w", filepath.Dir(path), err)
	}
	return changed, stop, nil
}

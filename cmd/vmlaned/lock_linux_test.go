package main

import (
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestBridgeLockSurvivesGC: a lock whose handle nobody holds any more
// still refuses a second vmlaned after garbage collections (a file kept
// only by the handle would be closed by its finalizer, dropping the
// flock), until it is closed.
func TestBridgeLockSurvivesGC(t *testing.T) {
	leaseFile := filepath.Join(t.TempDir(), "leases.json")
	take := func() {
		// The handle dies with this frame.
		if _, err := lockBridge(leaseFile, "vmlane0"); err != nil {
			t.Fatal(err)
		}
	}
	take()
	path := filepath.Join(filepath.Dir(leaseFile), "vmlaned-vmlane0.lock")
	t.Cleanup(func() { (&bridgeLock{path: path}).Close() })
	// Finalizers run on a goroutine of their own after the GC that found
	// their object unreachable, so each round waits for a sentinel's
	// finalizer, queued behind the file's, before trying the lock: a lock
	// that depends on the handle is gone by then.
	for round := range 3 {
		finalized := make(chan struct{})
		runtime.SetFinalizer(new([16]byte), func(*[16]byte) { close(finalized) })
		runtime.GC()
		<-finalized
		if g, err := lockBridge(leaseFile, "vmlane0"); err == nil || !strings.Contains(err.Error(), "already serves bridge vmlane0") {
			if g != nil {
				g.Close()
			}
			t.Fatalf("second lock after GC round %d = %v, want refused", round+1, err)
		}
	}
	if g, err := lockBridge(leaseFile, "vmlane1"); err != nil {
		t.Errorf("another bridge's lock: %v", err)
	} else {
		g.Close()
	}
	if err := (&bridgeLock{path: path}).Close(); err != nil {
		t.Fatal(err)
	}
	g, err := lockBridge(leaseFile, "vmlane0")
	if err != nil {
		t.Fatalf("lock after the holder closed it: %v", err)
	}
	g.Close()
}

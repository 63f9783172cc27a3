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
	for range 3 {
		runtime.GC()
	}
	if g, err := lockBridge(leaseFile, "vmlane0"); err == nil || !strings.Contains(err.Error(), "already serves bridge vmlane0") {
		if g != nil {
			g.Close()
		}
		t.Fatalf("second lock after GC = %v, want refused", err)
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

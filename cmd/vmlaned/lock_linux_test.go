package main

import (
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestBridgeLockSurvivesGC: the lock must hold for as long as the daemon
// runs. It used to live in an *os.File nobody referenced, which the GC's
// finalizer closed, dropping the flock: a second vmlaned then started.
func TestBridgeLockSurvivesGC(t *testing.T) {
	leaseFile := filepath.Join(t.TempDir(), "leases.json")
	f, err := lockBridge(leaseFile, "vmlane0")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	runtime.GC()
	runtime.GC()
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
	f.Close()
	if g, err := lockBridge(leaseFile, "vmlane0"); err != nil {
		t.Errorf("lock after the holder closed it: %v", err)
	} else {
		g.Close()
	}
}

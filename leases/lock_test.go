package leases

import (
	"errors"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLockTimeout: a writer that finds the lock held past lockTimeout
// gives up with ErrLockTimeout and a message naming the lock file, instead
// of waiting for ever behind a hung holder; once the holder lets go, the
// lock is free again (the abandoned wait releases what it got).
func TestLockTimeout(t *testing.T) {
	saved := lockTimeout
	lockTimeout = 100 * time.Millisecond
	t.Cleanup(func() { lockTimeout = saved })
	path := filepath.Join(t.TempDir(), "leases.json")
	s, err := Open(path, netip.MustParsePrefix("10.0.0.0/24"), netip.MustParseAddr("10.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	held, err := lockFile(path + ".lock")
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Reserve(ReserveRequest{MAC: "02:00:00:00:00:01"})
	if !errors.Is(err, ErrLockTimeout) || !strings.Contains(err.Error(), path+".lock") {
		t.Fatalf("Reserve with the lock held = %v, want ErrLockTimeout naming the lock file", err)
	}
	held.unlock()
	lockTimeout = 5 * time.Second
	if _, err := s.Reserve(ReserveRequest{MAC: "02:00:00:00:00:01"}); err != nil {
		t.Fatalf("Reserve after the holder let go: %v", err)
	}
}

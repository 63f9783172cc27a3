//go:build unix

package leases

import (
	"fmt"
	"os"
	"syscall"
	"time"
)

// fileLock is an exclusive flock(2) on a lock file beside the lease file.
// flock, unlike fcntl locks, belongs to the open file description, so it is
// released when the holder dies (SIGKILL included) and it is not dropped when
// another descriptor of the same file is closed in the same process.
type fileLock struct{ f *os.File }

// lockTimeout bounds the wait for the lease file's lock. A write holds it
// for one read, one fsynced write and a rename: milliseconds, or seconds
// on a disk that stalls. Waiting longer only hides a writer that hangs.
var lockTimeout = 30 * time.Second

// lockHeld, set only by benchmarks (export_test.go), is called with true
// once the lock is taken and with false just before it is released: the
// multi-process benchmark takes from it how long the lock sat free between
// two writers.
var lockHeld func(held bool)

func lockFile(path string) (*fileLock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock file: %w", err)
	}
	// A blocking flock wakes the moment the holder lets go, which polling
	// with LOCK_NB would not; it cannot be interrupted, so it runs on a
	// goroutine of its own, and a caller that gives up leaves it behind to
	// release the lock as soon as it gets it.
	done := make(chan error, 1)
	go func() {
		var err error
		for {
			err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
			if err != syscall.EINTR {
				break
			}
		}
		done <- err
	}()
	t := time.NewTimer(lockTimeout)
	defer t.Stop()
	select {
	case err = <-done:
	case <-t.C:
		go func() {
			<-done
			f.Close()
		}()
		return nil, fmt.Errorf("%w: %s has been held by another process for %v (a writer that hangs: see `fuser %s`)",
			ErrLockTimeout, path, lockTimeout, path)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	if lockHeld != nil {
		lockHeld(true)
	}
	return &fileLock{f: f}, nil
}

func (l *fileLock) unlock() error {
	if lockHeld != nil {
		lockHeld(false)
	}
	// Closing the only descriptor releases the flock.
	return l.f.Close()
}

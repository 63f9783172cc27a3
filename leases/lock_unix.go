//go:build unix

package leases

import (
	"fmt"
	"os"
	"syscall"
)

// fileLock is an exclusive flock(2) on a lock file beside the lease file.
// flock, unlike fcntl locks, belongs to the open file description, so it is
// released when the holder dies (SIGKILL included) and it is not dropped when
// another descriptor of the same file is closed in the same process.
type fileLock struct{ f *os.File }

func lockFile(path string) (*fileLock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock file: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return &fileLock{f: f}, nil
}

func (l *fileLock) unlock() error {
	// Closing the only descriptor releases the flock.
	return l.f.Close()
}

// Package atomicfile replaces files so that a reader sees the old content
// or the new, never a mix, and a crash at any moment leaves one of the two
// whole on disk. It is the one way vmlane writes a file another program
// reads: the lease file, the conflists, vmnet's plist and network file, and
// the state files of the pf anchor and the macOS routes. It imports the
// standard library only, so leases may use it.
package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// WriteFile replaces path with data, with mode perm: a temp file in the
// same folder (so the rename cannot cross file systems, and a file watch
// on the folder sees the rename), written, fsynced, renamed over path, and
// the folder fsynced (so the rename itself survives a power cut). The
// folder must exist. On error the temp file is removed and path is as it
// was.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	if err := Replace(path, data, perm); err != nil {
		return err
	}
	return SyncDir(folder(path))
}

// WriteFileAll is WriteFile, making path's folder first (mode 0755) when
// it does not exist: a state folder such as /var/db/vmlane may not yet on
// a fresh Mac.
func WriteFileAll(path string, data []byte, perm os.FileMode) error {
	if err := os.MkdirAll(folder(path), 0o755); err != nil {
		return err
	}
	return WriteFile(path, data, perm)
}

// folder is the folder path is in, "." for a bare name.
func folder(path string) string {
	if dir, _ := filepath.Split(path); dir != "" {
		return dir
	}
	return "."
}

// Replace is WriteFile but for the folder's fsync: path holds data, and
// the data is durable, but the rename becomes durable only with the
// folder's SyncDir, which the caller must run before it reports the
// write done. A writer that serializes others behind a lock (the lease
// store) releases the lock between the two, so the next writer's write
// overlaps this one's journal commit; the next writer read this version,
// so whatever it makes durable includes it.
func Replace(path string, data []byte, perm os.FileMode) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("creating temp file for %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, ignoreClosed(tmp.Close()))
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(perm); err != nil {
		return fmt.Errorf("setting mode of %s: %w", tmp.Name(), err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("renaming %s to %s: %w", tmp.Name(), path, err)
	}
	return nil
}

// ignoreClosed drops the error of closing a file already closed.
func ignoreClosed(err error) error {
	if errors.Is(err, os.ErrClosed) {
		return nil
	}
	return err
}

// SyncDir fsyncs a folder, making the renames and creations in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("opening folder %s to sync it: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing folder %s: %w", dir, err)
	}
	return nil
}

package pf

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/vmlane/vmlane/internal/atomicfile"
)

// readState reads one of vmlane's JSON state files (what it set up, for
// a restart or teardown to find). A missing file is the zero state: vmlane
// has set up nothing yet. kind names the file in errors.
func readState[T any](path, kind string) (T, error) {
	var st T
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, fmt.Errorf("%s state %s: %w", kind, path, err)
	}
	return st, nil
}

// writeFileAtomic replaces path with data (atomicfile.WriteFile), making
// its folder first: /var/db/vmlane may not exist on a Mac yet. A reader
// (vmnet, a VM runtime, `vmlanectl teardown`) sees the old file or the
// new one, never a mix, and a crash leaves one of the two whole.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, data, perm)
}

package pf

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
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

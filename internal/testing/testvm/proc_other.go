//go:build !linux

package testvm

import (
	"errors"
	"fmt"
	"io"
)

// startProcess fails: the guest needs Linux network namespaces and TAP
// devices.
func startProcess(argv []string) (console io.Reader, input io.Writer, proc process, stderr fmt.Stringer, err error) {
	return nil, nil, nil, nil, fmt.Errorf("test guests run on linux only: %w", errors.ErrUnsupported)
}

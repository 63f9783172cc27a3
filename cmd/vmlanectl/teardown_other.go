//go:build !linux && !darwin

package main

import (
	"errors"
	"io"
)

func teardown(io.Writer, teardownOpts) error {
	return errors.New("teardown is implemented for Linux and macOS nodes only")
}

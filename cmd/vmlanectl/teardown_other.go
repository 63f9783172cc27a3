//go:build !linux

package main

import (
	"errors"
	"io"
)

func teardown(io.Writer, teardownOpts) error {
	return errors.New("teardown is implemented for Linux nodes only so far")
}

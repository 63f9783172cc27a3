//go:build !linux && !darwin

package main

import (
	"context"
	"errors"
	"log/slog"
)

// run on systems other than Linux and macOS: vmlane has no backend for
// them; say so rather than pretend.
func run(context.Context, *config, *slog.Logger) error {
	return errors.New("vmlaned does not run on this system: vmlane supports Linux and macOS nodes")
}

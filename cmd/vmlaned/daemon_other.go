//go:build !linux

package main

import (
	"context"
	"errors"
	"log/slog"
)

// run on macOS is the macOS-nodes work (vmnet plist, routes, pf anchor),
// not built yet: say so rather than pretend.
func run(context.Context, *config, *slog.Logger) error {
	return errors.New("vmlaned does not run on this system yet: only Linux nodes are supported so far")
}

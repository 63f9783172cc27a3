package main

import (
	"context"
	"errors"
	"log/slog"
)

// runRoutesOnly is not for macOS, whose nodes are VM nodes (parseFlags
// refuses --routes-only there first).
func runRoutesOnly(context.Context, *config, *slog.Logger) error {
	return errors.New("--routes-only is for Linux nodes")
}

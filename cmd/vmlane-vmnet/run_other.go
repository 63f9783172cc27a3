//go:build !darwin

package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/vmlane/vmlane/pf/vmnet"
)

// serve: vmnet is macOS's.
func serve(context.Context, config, vmnet.Policy, *slog.Logger) error {
	return errors.New("vmlane-vmnet runs on macOS 26 or later: vmnet's network API is macOS's")
}

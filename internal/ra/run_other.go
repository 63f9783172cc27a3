//go:build !linux

package ra

import (
	"context"
	"errors"
	"log/slog"
)

// Run is Linux-only: on macOS vmnet's network is IPv4 only.
func Run(ctx context.Context, c Config, log *slog.Logger) error {
	return errors.New("ra: router advertisements are sent on Linux only")
}

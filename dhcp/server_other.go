//go:build !linux

package dhcp

import (
	"context"
	"errors"
	"log/slog"
)

// Serve is Linux-only: on macOS, vmnet's own DHCP server (bootpd) serves
// the VMs and vmlaned only configures it.
func Serve(ctx context.Context, iface string, h *Handler, log *slog.Logger) error {
	return errors.New("the DHCP server runs on Linux; on macOS vmnet's bootpd serves VMs")
}

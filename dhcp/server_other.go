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
	return errNotLinux
}

var errNotLinux = errors.New("the DHCP server runs on Linux; on macOS vmnet's bootpd serves VMs")

// Server is Linux-only, as Serve is.
type Server struct{}

// Listen is Linux-only, as Serve is.
func Listen(iface string, h *Handler) (*Server, error) { return nil, errNotLinux }

// Serve is Linux-only.
func (s *Server) Serve(ctx context.Context, log *slog.Logger) error { return errNotLinux }

// Close is Linux-only.
func (s *Server) Close() error { return errNotLinux }

// Server6 is Linux-only, as Serve is.
type Server6 struct{}

// Listen6 is Linux-only, as Serve is.
func Listen6(iface string, h *Handler6) (*Server6, error) { return nil, errNotLinux }

// Serve is Linux-only.
func (s *Server6) Serve(ctx context.Context, log *slog.Logger) error { return errNotLinux }

// Close is Linux-only.
func (s *Server6) Close() error { return errNotLinux }

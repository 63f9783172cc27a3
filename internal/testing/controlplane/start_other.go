//go:build !linux

package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/vmlane/vmlane/internal/testing/privtest"
)

// Start skips t (or fails it, under VMLANE_PRIVILEGED=require): the control
// plane runs in a Linux network namespace.
func Start(t testing.TB, opts Options) *ControlPlane {
	t.Helper()
	privtest.Missing(t, "the test control plane runs in Linux network namespaces only")
	return nil
}

// Dial fails: there is no control plane outside Linux.
func (cp *ControlPlane) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	return nil, fmt.Errorf("controlplane dial %s: %w", addr, errors.ErrUnsupported)
}

// Stop does nothing: there is no control plane outside Linux.
func (cp *ControlPlane) Stop() {}

// StopAPIServer does nothing: there is no control plane outside Linux.
func (cp *ControlPlane) StopAPIServer() {}

// StartAPIServer does nothing: there is no control plane outside Linux.
func (cp *ControlPlane) StartAPIServer() {}

// Restart does nothing: there is no control plane outside Linux.
func (cp *ControlPlane) Restart() {}

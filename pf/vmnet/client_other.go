//go:build !darwin

package vmnet

import (
	"errors"
	"unsafe"
)

// Lease is a network acquired from a broker; only macOS has one.
type Lease struct{}

// AcquireFrom fails everywhere but on macOS.
func AcquireFrom(service, name string) (*Lease, error) {
	return nil, errors.ErrUnsupported
}

// Serialization is nil off macOS.
func (*Lease) Serialization() unsafe.Pointer { return nil }

// Network fails off macOS.
func (*Lease) Network() (unsafe.Pointer, error) { return nil, errors.ErrUnsupported }

// Done is never closed off macOS.
func (*Lease) Done() <-chan struct{} { return nil }

// Close does nothing off macOS.
func (*Lease) Close() error { return nil }

//go:build !linux

package plugin

import (
	"errors"
	"net/netip"

	"github.com/vmlane/vmlane/internal/antispoof"
	"github.com/vmlane/vmlane/leases"
)

// errUnsupported: the CNI plugin drives Linux bridges, veths and TAPs. On
// macOS vmlaned configures vmnet instead, and no CNI plugin runs.
var errUnsupported = errors.New("the vmlane CNI plugin runs on Linux only")

type unsupported struct{}

func newDataplane() dataplane { return unsupported{} }

func (unsupported) DefaultMTU() int          { return 0 }
func (unsupported) CheckNetns(string) error  { return errUnsupported }
func (unsupported) EnableForwarding() error  { return errUnsupported }
func (unsupported) EnableForwarding6() error { return errUnsupported }
func (unsupported) EnableProxy(string) error { return errUnsupported }
func (unsupported) EnsureBridgeAddr(string, netip.Prefix) error {
	return errUnsupported
}
func (unsupported) BridgeStatus(string) error { return errUnsupported }
func (unsupported) EnsureBridge(string, netip.Prefix, int, string) (Link, error) {
	return Link{}, errUnsupported
}
func (unsupported) SetupVeth(string, string, string, string, int, string, bool, *VethGuard) (Link, Link, error) {
	return Link{}, Link{}, errUnsupported
}
func (unsupported) ConfigureAddress(string, string, netip.Prefix, netip.Addr) error {
	return errUnsupported
}
func (unsupported) SetupTap(string, TapSpec) (Link, error) {
	return Link{}, errUnsupported
}
func (unsupported) DeleteHostLink(string) error              { return errUnsupported }
func (unsupported) RouteHost(string, netip.Prefix) error     { return errUnsupported }
func (unsupported) UnrouteHost(string, netip.Prefix) error   { return errUnsupported }
func (unsupported) DeleteNetnsLinks(string, ...string) error { return errUnsupported }
func (unsupported) TapHolder(string, string, string) (TapState, error) {
	return TapState{}, errUnsupported
}
func (unsupported) Observe(string, Attached) (Observed, error) {
	return Observed{}, errUnsupported
}
func (unsupported) Guard(string, antispoof.Port, *antispoof.View) error { return errUnsupported }
func (unsupported) Unguard(string, ...string) error                     { return errUnsupported }
func (unsupported) Guarded(string) (antispoof.View, error)              { return antispoof.View{}, errUnsupported }
func (unsupported) Unmap(string, string, leases.Key) error              { return errUnsupported }

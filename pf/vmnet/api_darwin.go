package vmnet

import (
	"fmt"
	"net/netip"
	"sync"

	"github.com/ebitengine/purego"
)

// The frameworks, opened once. vmnet's vmnet_network functions exist from
// macOS 26; on an older macOS their symbols are missing and OpenAPI says so.
const (
	vmnetPath          = "/System/Library/Frameworks/vmnet.framework/vmnet"
	coreFoundationPath = "/System/Library/Frameworks/CoreFoundation.framework/CoreFoundation"
	libSystemPath      = "/usr/lib/libSystem.B.dylib"
)

// darwinAPI calls vmnet through purego. The signatures are written from
// the macOS 26 SDK's vmnet.h (and Apple's reference, which gives the same
// declarations): enums are uint32, in_addr, in6_addr and ether_addr_t are
// passed by pointer to their bytes in network order, objects are pointers.
type darwinAPI struct {
	configurationCreate        func(mode uint32, status *uint32) uintptr
	setIPv4Subnet              func(cfg uintptr, addr, mask *[4]byte) uint32
	setIPv6Prefix              func(cfg uintptr, prefix *[16]byte, bits uint8) uint32
	setMTU                     func(cfg uintptr, mtu uint32) uint32
	addDHCPReservation         func(cfg uintptr, mac *[6]byte, addr *[4]byte) uint32
	disableNAT44, disableNAT66 func(cfg uintptr)
	networkCreate              func(cfg uintptr, status *uint32) uintptr
	getIPv4Subnet              func(n uintptr, addr, mask *[4]byte)
	getIPv6Prefix              func(n uintptr, prefix *[16]byte, bits *uint8)
	copySerialization          func(n uintptr, status *uint32) uintptr
	createWithSerialization    func(ser uintptr, status *uint32) uintptr
	cfRelease                  func(obj uintptr)
	xpcRelease                 func(obj uintptr)
}

var (
	apiOnce sync.Once
	apiImpl *darwinAPI
	apiErr  error
)

// OpenAPI loads vmnet, CoreFoundation and libxpc and binds the functions
// API needs. It fails on a macOS without the vmnet_network API (before 26).
func OpenAPI() (API, error) {
	apiOnce.Do(func() { apiImpl, apiErr = openAPI() })
	if apiErr != nil {
		return nil, apiErr
	}
	return apiImpl, nil
}

func openAPI() (a *darwinAPI, err error) {
	vm, err := purego.Dlopen(vmnetPath, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("opening vmnet: %w", err)
	}
	cf, err := purego.Dlopen(coreFoundationPath, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("opening CoreFoundation: %w", err)
	}
	sys, err := purego.Dlopen(libSystemPath, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("opening libSystem: %w", err)
	}
	// RegisterLibFunc panics on a missing symbol: check them first, so
	// that macOS 15 gets an error naming what is missing.
	a = &darwinAPI{}
	for _, b := range []struct {
		lib  uintptr
		name string
		fn   any
	}{
		{vm, "vmnet_network_configuration_create", &a.configurationCreate},
		{vm, "vmnet_network_configuration_set_ipv4_subnet", &a.setIPv4Subnet},
		{vm, "vmnet_network_configuration_set_ipv6_prefix", &a.setIPv6Prefix},
		{vm, "vmnet_network_configuration_set_mtu", &a.setMTU},
		{vm, "vmnet_network_configuration_add_dhcp_reservation", &a.addDHCPReservation},
		{vm, "vmnet_network_configuration_disable_nat44", &a.disableNAT44},
		{vm, "vmnet_network_configuration_disable_nat66", &a.disableNAT66},
		{vm, "vmnet_network_create", &a.networkCreate},
		{vm, "vmnet_network_get_ipv4_subnet", &a.getIPv4Subnet},
		{vm, "vmnet_network_get_ipv6_prefix", &a.getIPv6Prefix},
		{vm, "vmnet_network_copy_serialization", &a.copySerialization},
		{vm, "vmnet_network_create_with_serialization", &a.createWithSerialization},
		{cf, "CFRelease", &a.cfRelease},
		{sys, "xpc_release", &a.xpcRelease},
	} {
		if _, err := purego.Dlsym(b.lib, b.name); err != nil {
			return nil, fmt.Errorf("%s is missing (vmnet's network API needs macOS 26 or later): %w", b.name, err)
		}
		purego.RegisterLibFunc(b.fn, b.lib, b.name)
	}
	return a, nil
}

func (a *darwinAPI) ConfigurationCreate(mode Mode) (Configuration, Status) {
	var st uint32
	cfg := a.configurationCreate(uint32(mode), &st)
	return Configuration(cfg), Status(st)
}

func (a *darwinAPI) ConfigurationSetIPv4Subnet(cfg Configuration, addr, mask netip.Addr) Status {
	ad, m := addr.As4(), mask.As4()
	return Status(a.setIPv4Subnet(uintptr(cfg), &ad, &m))
}

func (a *darwinAPI) ConfigurationSetIPv6Prefix(cfg Configuration, prefix netip.Addr, bits uint8) Status {
	p := prefix.As16()
	return Status(a.setIPv6Prefix(uintptr(cfg), &p, bits))
}

func (a *darwinAPI) ConfigurationSetMTU(cfg Configuration, mtu uint32) Status {
	return Status(a.setMTU(uintptr(cfg), mtu))
}

func (a *darwinAPI) ConfigurationAddDHCPReservation(cfg Configuration, mac [6]byte, addr netip.Addr) Status {
	ad := addr.As4()
	return Status(a.addDHCPReservation(uintptr(cfg), &mac, &ad))
}

func (a *darwinAPI) ConfigurationDisableNAT44(cfg Configuration) { a.disableNAT44(uintptr(cfg)) }
func (a *darwinAPI) ConfigurationDisableNAT66(cfg Configuration) { a.disableNAT66(uintptr(cfg)) }

func (a *darwinAPI) NetworkCreate(cfg Configuration) (Network, Status) {
	var st uint32
	n := a.networkCreate(uintptr(cfg), &st)
	return Network(n), Status(st)
}

func (a *darwinAPI) NetworkGetIPv4Subnet(n Network) (netip.Addr, netip.Addr) {
	var addr, mask [4]byte
	a.getIPv4Subnet(uintptr(n), &addr, &mask)
	return netip.AddrFrom4(addr), netip.AddrFrom4(mask)
}

func (a *darwinAPI) NetworkGetIPv6Prefix(n Network) (netip.Addr, uint8) {
	var p [16]byte
	var bits uint8
	a.getIPv6Prefix(uintptr(n), &p, &bits)
	return netip.AddrFrom16(p), bits
}

func (a *darwinAPI) NetworkCopySerialization(n Network) (XPCObject, Status) {
	var st uint32
	s := a.copySerialization(uintptr(n), &st)
	return XPCObject(s), Status(st)
}

func (a *darwinAPI) Release(obj uintptr)      { a.cfRelease(obj) }
func (a *darwinAPI) XPCRelease(obj XPCObject) { a.xpcRelease(uintptr(obj)) }

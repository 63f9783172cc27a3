package vmnet

import "net/netip"

// Handles of vmnet's objects: a vmnet_network_configuration_ref, a
// vmnet_network_ref and an xpc_object_t. They are the C pointers, opaque to
// Go; 0 is NULL.
type (
	Configuration uintptr
	Network       uintptr
	XPCObject     uintptr
)

// API is the slice of vmnet (macOS 26's vmnet_network functions) that
// vmlane calls, one method per C function and shaped like it: pointer
// arguments become values, out-parameters become results, and the
// addresses are netip values (in_addr and in6_addr in network byte order
// on the C side). The darwin implementation calls the framework through
// purego; tests use a recording fake.
type API interface {
	// ConfigurationCreate is vmnet_network_configuration_create(mode, &status).
	ConfigurationCreate(mode Mode) (Configuration, Status)
	// ConfigurationSetIPv4Subnet is
	// vmnet_network_configuration_set_ipv4_subnet(cfg, &addr, &mask).
	ConfigurationSetIPv4Subnet(cfg Configuration, addr, mask netip.Addr) Status
	// ConfigurationSetIPv6Prefix is
	// vmnet_network_configuration_set_ipv6_prefix(cfg, &prefix, len).
	ConfigurationSetIPv6Prefix(cfg Configuration, prefix netip.Addr, bits uint8) Status
	// ConfigurationSetMTU is vmnet_network_configuration_set_mtu(cfg, mtu).
	ConfigurationSetMTU(cfg Configuration, mtu uint32) Status
	// ConfigurationAddDHCPReservation is
	// vmnet_network_configuration_add_dhcp_reservation(cfg, &mac, &addr).
	ConfigurationAddDHCPReservation(cfg Configuration, mac [6]byte, addr netip.Addr) Status
	// ConfigurationDisableNAT44 and ConfigurationDisableNAT66 are
	// vmnet_network_configuration_disable_nat44 and _nat66 (void).
	ConfigurationDisableNAT44(cfg Configuration)
	ConfigurationDisableNAT66(cfg Configuration)
	// NetworkCreate is vmnet_network_create(cfg, &status).
	NetworkCreate(cfg Configuration) (Network, Status)
	// NetworkGetIPv4Subnet is vmnet_network_get_ipv4_subnet(net, &addr, &mask).
	NetworkGetIPv4Subnet(n Network) (addr, mask netip.Addr)
	// NetworkGetIPv6Prefix is vmnet_network_get_ipv6_prefix(net, &prefix, &len).
	NetworkGetIPv6Prefix(n Network) (prefix netip.Addr, bits uint8)
	// NetworkCopySerialization is vmnet_network_copy_serialization(net, &status).
	NetworkCopySerialization(n Network) (XPCObject, Status)
	// Release is CFRelease for a configuration or a network (what vmnet's
	// objects are released with; vmnet-broker does the same).
	Release(obj uintptr)
	// XPCRelease is xpc_release, for a serialization.
	XPCRelease(obj XPCObject)
}

package vmnet

// Acquire asks vmlane-vmnet (ServiceName) for the network named name, as
// a VM runtime does before it attaches a VM: the Lease's Network is a
// vmnet_network_ref for VZVmnetNetworkDeviceAttachment's initWithNetwork:
// or vmnet_interface_start_with_network, and its Serialization the XPC
// object for APIs that take that (Code-Hex/vz's
// vmnet.NewNetworkWithSerialization). Keep the Lease open while VMs use
// the network: the connection is the hold. docs/runtimes.md has examples.
func Acquire(name string) (*Lease, error) { return AcquireFrom(ServiceName, name) }

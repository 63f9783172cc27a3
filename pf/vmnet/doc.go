// Package vmnet holds a Mac node's pod network on macOS 26 and later, and
// hands it to VM runtimes.
//
// From macOS 26 vmnet makes a network from a configuration object
// (vmnet_network_configuration_create, its setters, vmnet_network_create),
// and the network lives as long as its creator holds it. A VM runtime
// process cannot use a network another process made, but it can rebuild one
// from the XPC serialization the holder gives it
// (vmnet_network_copy_serialization, vmnet_network_create_with_serialization).
// vmlane-vmnet (cmd/vmlane-vmnet), a LaunchDaemon, creates the node's pod
// network on the node's podCIDR with Create, checks what vmnet took, and
// answers the vmnet-broker protocol (Handle) on its Mach service so that
// runtimes acquire it by name; Acquire is that protocol's client, for Go
// runtimes.
//
// The layout follows the rest of vmlane's macOS code: everything that
// decides is pure and tested on any system (Plan, Create against the API
// seam, Handle, Allowed, CheckState), and what calls into macOS (vmnet,
// CoreFoundation, libxpc and libdispatch, through purego, without cgo) sits
// in _darwin.go files behind API and the XPC layer. Recorded call sequences
// of Create against a fake API are golden files in testdata.
//
// This package imports pf (the network description vmlaned writes) and
// github.com/ebitengine/purego, nothing else of vmlane's or beyond the
// standard library, so that a runtime can import it.
package vmnet

// Package routes is vmlane's route controller: it makes every node's pod
// subnets reachable from every other node by direct routes (podCIDR via the
// node's address), as flannel's host-gw backend does, and keeps pod-to-pod
// traffic un-NATed.
//
// The logic is pure and tested without root: Compute turns the Node list
// into the desired routes, Reconcile drives a routeTable to them, Chains
// renders the iptables rules and EnsureChains keeps them whole. Kernel
// effects sit behind routeTable and iptablesInterface, with netlink and
// go-iptables implementations on Linux and recording fakes in the tests.
//
// Ownership: vmlane's routes carry one route protocol number
// (DefaultProtocol unless configured), and vmlane never changes or deletes a
// route without it. Its iptables rules live in its own chains (ChainNAT,
// ChainForward), each rule commented, reached by one commented jump.
//
// On macOS the same Controller, Loop and Reconcile run over other kernel
// effects (NewAnchorController): the BSD routing table (NewBSDTable: a
// PF_ROUTE dump, route(8) for changes) and, instead of iptables, package
// a NATBackend (vmlaned's: package pf's anchor and the forwarding
// sysctl, wired in by cmd/vmlaned, so routes does not import pf). BSD routes carry no
// protocol number, so ownership there is a state file listing the routes
// vmlane installed (DefaultBSDStatePath); List marks exactly those with
// the configured protocol, and the rest of the package works unchanged.
package routes

// Package bridge sets up vmlane's node bridge (vmlane0 by default): it
// exists, is up, has the pinned MAC and MTU, and carries the gateway as its
// only address of that family. The CNI plugin runs it on every ADD and
// vmlaned at bootstrap, so either may come first. The setup is Linux only;
// NotBridgeError is portable, because the CNI plugin's seam returns it.
package bridge

import "fmt"

// HostRouteProtocol marks the host routes of VMs whose addresses moved in
// from another node's subnet (`ip route … proto 78`), beside the route
// controller's 77: each routes one address onto the bridge, scope link.
// The CNI plugin adds and removes them at ADD and DEL (RouteHost,
// UnrouteHost); vmlaned sweeps what an interrupted one left.
const HostRouteProtocol = 78

// NotBridgeError: the name belongs to another kind of link (the host's
// uplink, say), which vmlane must not touch.
type NotBridgeError struct{ Name, Type string }

func (e *NotBridgeError) Error() string {
	return fmt.Sprintf("%q is an existing link of type %q, not a bridge", e.Name, e.Type)
}

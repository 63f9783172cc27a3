// Package pf is vmlane's macOS side: the pf anchor that keeps pod-to-pod
// traffic un-NATed behind vmnet's shared network, and vmnet's own
// configuration, which puts the VMs of a Mac node on that node's podCIDR.
//
// vmnet's configuration takes one of two forms, chosen by the macOS version
// (ModeFor):
//
//   - up to macOS 15, the keys Shared_Net_Address (the gateway: the first
//     host of the subnet, never the network address) and Shared_Net_Mask of
//     /Library/Preferences/SystemConfiguration/com.apple.vmnet.plist, which
//     vmnet reads when its shared network starts (EditPlist, ApplyPlist);
//   - from macOS 26, which ignores those keys, a JSON description of the
//     network (Network) that vmlane-vmnet makes the network from with the
//     vmnet_network API and hands to VM runtimes (package pf/vmnet).
//
// Everything that decides is pure and tested on any system with golden
// files: NoNATRules and RenderAnchor, EditPlist, Network.Marshal, ModeFor,
// CheckBridge. What touches the system goes through commandRunner (pfctl)
// or plain files; the real runner and the OS-version sysctl live in
// _darwin.go files.
//
// Ownership: vmlane's pf rules live only in its own anchor (DefaultAnchor,
// under com.apple/, which macOS's /etc/pf.conf evaluates). vmlane enables
// pf by reference (pfctl -E), keeps the reference's token in its state
// file and gives it back with pfctl -X; it never disables pf (pfctl -d),
// and never flushes or reloads the main ruleset. In vmnet's plist it
// changes the two Shared_Net_* keys and nothing else, and it remembers
// their old values so that `vmlanectl teardown` can put them back.
//
// This package imports nothing else of vmlane's.
package pf

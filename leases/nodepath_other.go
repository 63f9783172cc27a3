//go:build !darwin

package leases

// NodePath is the lease file of the node a program runs on, what Read and
// Wait read when given no path: vmlane's own (DefaultPath), where the CNI
// plugin and vmlaned's DHCP server record the leases. On macOS it is
// bootpd's instead.
const NodePath = DefaultPath

package leases

// NodePath is the lease file of the node a program runs on, what Read and
// Wait read when given no path. On macOS it is bootpd's: vmnet's DHCP
// server (bootpd) hands out the VMs' addresses, and vmlaned runs no DHCP
// server of its own there, so a VM runtime finds its VMs' leases in
// BootpdPath.
const NodePath = BootpdPath

//go:build !linux && !darwin

package dhcp

import "syscall"

// ctimeOf is 0 where the change time is not known here: the identity is
// then device, inode, size and mtime.
func ctimeOf(*syscall.Stat_t) int64 { return 0 }

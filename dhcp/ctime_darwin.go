package dhcp

import "syscall"

// ctimeOf is the inode's change time, in nanoseconds.
func ctimeOf(st *syscall.Stat_t) int64 { return st.Ctimespec.Nano() }

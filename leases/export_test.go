//go:build unix

package leases

// SetLockHook sets lockHeld, for the benchmarks of package leases_test.
func SetLockHook(fn func(held bool)) { lockHeld = fn }

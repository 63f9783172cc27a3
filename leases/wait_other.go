//go:build !linux

package leases

// watchFile has no change notification off Linux: Wait polls.
func watchFile(string) (<-chan struct{}, func(), error) {
	return nil, func() {}, nil
}

package pf

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// ProductVersion is macOS's version ("15.6.1", "26.0"), from the
// kern.osproductversion sysctl; ModeFor reads it.
func ProductVersion() (string, error) {
	v, err := unix.Sysctl("kern.osproductversion")
	if err != nil {
		return "", fmt.Errorf("sysctl kern.osproductversion: %w", err)
	}
	return v, nil
}

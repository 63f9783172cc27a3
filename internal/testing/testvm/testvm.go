// Package testvm boots a tiny QEMU guest on a TAP device so that vmlane's
// privileged and end-to-end tests can check what a real VM sees: the
// address it gets by DHCP or static configuration, and whether it reaches
// its gateway and its peers.
//
// The guest is a Debian kernel plus a busybox initramfs, built once by
// build-guest.sh (make guest) into a cache directory named by the
// VMLANE_GUEST_DIR environment variable. Its /init (guest/init) reads its
// orders from the kernel command line and reports on the serial console in
// VMLANE-* lines, which this package parses into a [Result]. A guest
// started with Config.Hold stays up once done and takes commands on its
// serial console: [VM.Ping] and [VM.Fetch] run ping and wget inside it, and
// its httpd tells clients the address it sees them come from.
//
// QEMU runs with TCG (no KVM), so expect a few seconds per boot. The TAP
// device and the network namespace it lives in belong to the caller; this
// package only starts QEMU in that namespace and kills it again.
package testvm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// EnvGuestDir names the environment variable that points at the output
// directory of build-guest.sh. The Makefile exports it.
const EnvGuestDir = "VMLANE_GUEST_DIR"

// ErrNotBuilt is returned (wrapped) by [Find] when the guest has not been
// built. Tests skip on it rather than fail.
var ErrNotBuilt = errors.New("test guest not built")

// Guest is a built test guest: the kernel and initramfs QEMU boots.
type Guest struct {
	// Kernel is the kernel image: the plain ELF vmlinux when the build
	// could extract it (QEMU boots it through PVH, about 2 s faster under
	// TCG), otherwise the bzImage vmlinuz.
	Kernel string
	// Initrd is the gzip'd cpio initramfs holding busybox and /init.
	Initrd string
}

// Find locates the guest built by build-guest.sh in $VMLANE_GUEST_DIR. It
// wraps [ErrNotBuilt] when the variable is unset or the build is missing or
// incomplete, with a message that says how to build it.
func Find() (Guest, error) {
	dir := os.Getenv(EnvGuestDir)
	if dir == "" {
		return Guest{}, fmt.Errorf("%w: %s is not set; run `make guest` (or `bash internal/testing/testvm/build-guest.sh DIR` and export %s=DIR)",
			ErrNotBuilt, EnvGuestDir, EnvGuestDir)
	}
	return FindIn(dir)
}

// FindIn is [Find] for an explicit build directory.
func FindIn(dir string) (Guest, error) {
	// build-guest.sh writes .stamp last: without it the build is partial.
	for _, name := range []string{".stamp", "vmlinuz", "initrd.img"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return Guest{}, fmt.Errorf("%w: %s=%s has no %s; run `make guest`: %w",
				ErrNotBuilt, EnvGuestDir, dir, name, err)
		}
	}
	g := Guest{
		Kernel: filepath.Join(dir, "vmlinuz"),
		Initrd: filepath.Join(dir, "initrd.img"),
	}
	if _, err := os.Stat(filepath.Join(dir, "vmlinux")); err == nil {
		g.Kernel = filepath.Join(dir, "vmlinux")
	}
	return g, nil
}

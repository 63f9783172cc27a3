// Package sysctl turns IP forwarding on, the one kernel setting vmlane
// writes on a node (the node routes its pods' traffic). Every writer of it
// (vmlaned at bootstrap, the CNI plugin's ADD, the macOS route backend)
// goes through EnsureForwarding, over the Store of its system: /proc/sys
// files on Linux, sysctl(8) on macOS. It imports the standard library and
// internal/command only.
package sysctl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/vmlane/vmlane/internal/command"
)

// The forwarding settings of each system and family.
const (
	LinuxIPv4Forwarding = "net.ipv4.ip_forward"
	LinuxIPv6Forwarding = "net.ipv6.conf.all.forwarding"
	MacIPv4Forwarding   = "net.inet.ip.forwarding"
	MacIPv6Forwarding   = "net.inet6.ip6.forwarding"
)

// Store reads and writes kernel settings by their dotted names.
type Store interface {
	Get(name string) (string, error)
	Set(name, value string) error
}

// EnsureForwarding sets each of names to 1 unless it is 1 already, and
// returns the names it changed. The read first keeps a periodic resync
// from writing a setting every pass. It never turns forwarding off: other
// software on the node may rely on it. Errors name the setting and say
// how to set it by hand.
func EnsureForwarding(s Store, names ...string) (changed []string, err error) {
	var errs []error
	for _, n := range names {
		if v, err := s.Get(n); err == nil && strings.TrimSpace(v) == "1" {
			continue
		}
		if err := s.Set(n, "1"); err != nil {
			errs = append(errs, fmt.Errorf("turning on %s (sysctl -w %s=1): %w", n, n, err))
			continue
		}
		changed = append(changed, n)
	}
	return changed, errors.Join(errs...)
}

// Proc is Linux's /proc/sys. Root is where it is mounted ("/proc/sys"
// when empty).
type Proc struct{ Root string }

func (p Proc) path(name string) string {
	root := p.Root
	if root == "" {
		root = "/proc/sys"
	}
	return filepath.Join(root, strings.ReplaceAll(name, ".", "/"))
}

// Get reads a setting.
func (p Proc) Get(name string) (string, error) {
	b, err := os.ReadFile(p.path(name))
	return string(b), err
}

// Set writes a setting. /proc/sys files exist or the setting does not, so
// it never creates one.
func (p Proc) Set(name, value string) error {
	f, err := os.OpenFile(p.path(name), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value + "\n")
	return errors.Join(err, f.Close())
}

// Command is sysctl(8) run through a command.Runner: macOS, where no
// /proc exists.
type Command struct{ Run command.Runner }

// Get runs sysctl -n name.
func (c Command) Get(name string) (string, error) { return c.Run.Run("", "sysctl", "-n", name) }

// Set runs sysctl -w name=value.
func (c Command) Set(name, value string) error {
	_, err := c.Run.Run("", "sysctl", "-w", name+"="+value)
	return err
}

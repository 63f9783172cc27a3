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

// BridgeProxy are the settings of a Linux bridge that make the node answer
// ARP and NDP on it for addresses it routes elsewhere: a VM whose addresses
// moved to another node keeps talking to its home subnet's gateway and
// neighbours from there, and the pods it left behind keep reaching it. The
// values are what they must be: proxy ARP on, NDP proxying on (for the
// addresses of the neighbour proxy table only), and no proxy delay in
// either family (Linux delays a proxy reply to a broadcast ARP request, or
// to a neighbour solicitation not addressed to the node's own MAC, by a
// random time up to 0.8 s otherwise).
func BridgeProxy(bridge string) [][2]string {
	return [][2]string{
		{"net.ipv4.conf." + bridge + ".proxy_arp", "1"},
		{"net.ipv4.neigh." + bridge + ".proxy_delay", "0"},
		{"net.ipv6.conf." + bridge + ".proxy_ndp", "1"},
		{"net.ipv6.neigh." + bridge + ".proxy_delay", "0"},
	}
}

// Ensure sets each name to its value unless it has it already.
func Ensure(s Store, settings [][2]string) error {
	var errs []error
	for _, kv := range settings {
		if v, err := s.Get(kv[0]); err == nil && strings.TrimSpace(v) == kv[1] {
			continue
		}
		if err := s.Set(kv[0], kv[1]); err != nil {
			errs = append(errs, fmt.Errorf("setting %s (sysctl -w %s=%s): %w", kv[0], kv[0], kv[1], err))
		}
	}
	return errors.Join(errs...)
}

package controlplane

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"

	"github.com/containernetworking/plugins/pkg/ns"
)

// seq numbers the control planes of one test binary.
var seq atomic.Int64

// ipCmd runs ip(8) with args, returning its output in the error.
func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// addSwitchLink connects namespace name to bridge in switchNS with a veth
// pair: eth0 with addr on our side, vcp<pid>-<n> (hex, to fit IFNAMSIZ) as
// a bridge port on theirs.
func addSwitchLink(name string, n int64, addr netip.Prefix, switchNS, bridge string) error {
	port := fmt.Sprintf("vcp%x-%x", os.Getpid(), n)
	if len(port) > 15 {
		return fmt.Errorf("veth name %q is longer than IFNAMSIZ-1", port)
	}
	steps := [][]string{
		{"-n", name, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", switchNS},
		{"-n", switchNS, "link", "set", port, "master", bridge},
		{"-n", switchNS, "link", "set", port, "up"},
		{"-n", name, "addr", "add", addr.String(), "dev", "eth0"},
		{"-n", name, "link", "set", "eth0", "up"},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			return fmt.Errorf("connecting %s to bridge %s in %s: %w", name, bridge, switchNS, err)
		}
	}
	return nil
}

// inNetNS runs fn on an OS thread switched into the namespace at path.
// Sockets fn opens stay in that namespace after the thread switches back,
// and processes it starts inherit it: Go forks from the calling, locked
// thread.
func inNetNS(path string, fn func() error) error {
	return ns.WithNetNSPath(path, func(ns.NetNS) error { return fn() })
}

// Dial connects to addr from inside the control plane's namespace; the
// connection keeps working from any thread afterwards. It has the shape of
// rest.Config.Dial and http.Transport.DialContext. addr must be an IP
// literal and port: resolving a name, or dialing several addresses in
// parallel, would happen on other threads, outside the namespace.
func (cp *ControlPlane) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if _, err := netip.ParseAddrPort(addr); err != nil {
		return nil, fmt.Errorf("controlplane dial %s: want IP:port: %w", addr, err)
	}
	var c net.Conn
	err := inNetNS(cp.nsPath, func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

package bridge

import (
	"github.com/vmlane/vmlane/internal/kernel"

	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// IsNotFound reports whether err says a link does not exist.
func IsNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, syscall.ENODEV)
}

// Ensure makes the bridge exist, up, with mtu and mac, and with gw as its
// only address of gw's family (a gateway of an older pod CIDR is replaced,
// as the bridge plugin's forceAddress does). It returns the bridge's MAC.
// Concurrent callers (parallel CNI ADDs) are fine: each step tolerates the
// other having done it.
func Ensure(name string, gw netip.Prefix, mtu int, mac string) (string, error) {
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return "", err
	}
	l, err := netlinksafe.LinkByName(name)
	if IsNotFound(err) {
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: mtu, HardwareAddr: hw, TxQLen: -1}}
		err = netlink.LinkAdd(br)
		if err != nil && !errors.Is(err, syscall.EEXIST) { // EEXIST: a concurrent caller made it
			return "", fmt.Errorf("creating bridge: %w", kernel.Explain(err, kernel.Bridge))
		}
		l, err = netlinksafe.LinkByName(name)
	}
	if err != nil {
		return "", err
	}
	if _, ok := l.(*netlink.Bridge); !ok {
		return "", &NotBridgeError{Name: name, Type: l.Type()}
	}
	a := l.Attrs()
	if a.MTU != mtu {
		if err := netlink.LinkSetMTU(l, mtu); err != nil {
			return "", fmt.Errorf("setting MTU %d: %w", mtu, err)
		}
	}
	// A bridge takes the lowest MAC of its ports unless one is set, so its
	// MAC (the pods' gateway MAC) would change as pods come and go and
	// every guest's ARP entry for the gateway would go stale. Setting it
	// pins it.
	if a.HardwareAddr.String() != hw.String() {
		if err := netlink.LinkSetHardwareAddr(l, hw); err != nil {
			return "", fmt.Errorf("pinning MAC %s: %w", hw, err)
		}
	}
	if err := ensureOnlyAddr(l, gw); err != nil {
		return "", err
	}
	// Before the bridge is up, and so before its first port: a frame to
	// a link-local group address learns nothing from then on.
	if _, err := ensureNoLinkLocalLearn(a.Index); err != nil {
		return "", err
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return "", fmt.Errorf("setting up: %w", err)
	}
	return hw.String(), nil
}

// EnsureAddr makes gw the bridge's only address of gw's family (IPv6
// link-local addresses aside), as Ensure does for the gateway it is given:
// a dual-stack node's bridge gets its IPv6 gateway this way.
func EnsureAddr(name string, gw netip.Prefix) error {
	l, err := netlinksafe.LinkByName(name)
	if err != nil {
		return err
	}
	if _, ok := l.(*netlink.Bridge); !ok {
		return &NotBridgeError{Name: name, Type: l.Type()}
	}
	return ensureOnlyAddr(l, gw)
}

// ensureOnlyAddr adds gw, then removes every other address of its family.
// Adding first keeps the bridge addressed throughout. An IPv6 gateway is
// added without duplicate address detection: it is the node's own address
// in the node's own subnet, and DAD would leave it tentative (unusable as a
// source, so no router advertisement or DHCPv6 reply) for a second or more.
func ensureOnlyAddr(l netlink.Link, gw netip.Prefix) error {
	want := &netlink.Addr{IPNet: &net.IPNet{IP: gw.Addr().AsSlice(), Mask: net.CIDRMask(gw.Bits(), gw.Addr().BitLen())}}
	if gw.Addr().Is6() {
		want.Flags = unix.IFA_F_NODAD
	}
	if err := netlink.AddrAdd(l, want); err != nil && !errors.Is(err, syscall.EEXIST) {
		if gw.Addr().Is6() && ipv6Disabled(l.Attrs().Name) {
			return fmt.Errorf("adding gateway %s: IPv6 is disabled on %s (net.ipv6.conf.%s.disable_ipv6 = 1): enable it, or leave the network IPv4-only: %w", gw, l.Attrs().Name, l.Attrs().Name, err)
		}
		return fmt.Errorf("adding gateway %s: %w", gw, err)
	}
	fam := netlink.FAMILY_V4
	if gw.Addr().Is6() {
		fam = netlink.FAMILY_V6
	}
	addrs, err := netlinksafe.AddrList(l, fam)
	if err != nil {
		return fmt.Errorf("listing addresses: %w", err)
	}
	for _, a := range addrs {
		if a.IPNet.String() == want.IPNet.String() || (fam == netlink.FAMILY_V6 && a.IP.IsLinkLocalUnicast()) {
			continue
		}
		if err := netlink.AddrDel(l, &a); err != nil && !errors.Is(err, syscall.EADDRNOTAVAIL) {
			return fmt.Errorf("removing stale gateway %s: %w", a.IPNet, err)
		}
	}
	return nil
}

// ipv6Disabled reports whether IPv6 is off on the link (or in the kernel).
func ipv6Disabled(name string) bool {
	b, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + name + "/disable_ipv6")
	return err != nil || strings.TrimSpace(string(b)) == "1"
}

// Status returns an error unless the bridge exists and is up.
func Status(name string) error {
	l, err := netlinksafe.LinkByName(name)
	if err != nil {
		return err
	}
	if _, ok := l.(*netlink.Bridge); !ok {
		return &NotBridgeError{Name: name, Type: l.Type()}
	}
	if l.Attrs().Flags&net.FlagUp == 0 {
		return errors.New("bridge is down")
	}
	return nil
}

// Ports returns the names of the links whose master is the bridge.
func Ports(name string) (map[string]bool, error) {
	br, err := netlinksafe.LinkByName(name)
	if err != nil {
		return nil, err
	}
	links, err := netlinksafe.LinkList()
	if err != nil {
		return nil, err
	}
	ports := map[string]bool{}
	for _, l := range links {
		if l.Attrs().MasterIndex == br.Attrs().Index {
			ports[l.Attrs().Name] = true
		}
	}
	return ports, nil
}

// Delete removes the bridge if it exists (vmlanectl teardown).
func Delete(name string) error {
	l, err := netlinksafe.LinkByName(name)
	if IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, ok := l.(*netlink.Bridge); !ok {
		return &NotBridgeError{Name: name, Type: l.Type()}
	}
	return netlink.LinkDel(l)
}

// DefaultRouteMTU is the MTU of the interface of the IPv4 default route, 0
// when there is none: pods get the MTU of the path their traffic leaves by.
func DefaultRouteMTU() int {
	routes, err := netlinksafe.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		return 0
	}
	for _, r := range routes {
		if r.Dst != nil && r.Dst.IP != nil && !r.Dst.IP.IsUnspecified() {
			continue
		}
		if l, err := netlink.LinkByIndex(r.LinkIndex); err == nil {
			return l.Attrs().MTU
		}
	}
	return 0
}

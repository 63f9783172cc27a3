// Package vmnetfake is a recording fake of pf/vmnet's API: it prints each
// call into vmnet in C syntax, answers with the statuses a test gives it,
// and keeps track of the objects not yet released.
package vmnetfake

import (
	"fmt"
	"github.com/vmlane/vmlane/pf/vmnet"
	"net"
	"net/netip"
	"slices"
	"strings"
)

// API records vmnet calls in C syntax and answers them. Fail gives a
// function's status (vmnet.Success when absent; "FUNCTION/ADDRESS" for one
// reservation, "vmnet_network_configuration_set_ipv4_subnet/first-host"
// to refuse only the first-host form); Subnet and IPv6 are what the
// network reports it took (what was set, when not valid).
type API struct {
	Calls  []string
	Fail   map[string]vmnet.Status
	Subnet netip.Prefix
	IPv6   netip.Prefix

	next      uintptr
	live      map[uintptr]string // handles not yet released
	setSubnet netip.Prefix
	setIPv6   netip.Prefix
}

// New is an API with nothing failing.
func New() *API { return &API{Fail: map[string]vmnet.Status{}, live: map[uintptr]string{}, next: 0x10} }

// Held names the objects made and not released.
func (f *API) Held() []string {
	var held []string
	for _, n := range f.live {
		held = append(held, n)
	}
	slices.Sort(held)
	return held
}

func (f *API) status(fn string) vmnet.Status {
	if st, ok := f.Fail[fn]; ok {
		return st
	}
	return vmnet.Success
}

func (f *API) handle(kind string) uintptr {
	f.next++
	f.live[f.next] = fmt.Sprintf("%s#%d", kind, f.next-0x10)
	return f.next
}

func (f *API) name(h uintptr) string {
	if n, ok := f.live[h]; ok {
		return n
	}
	return fmt.Sprintf("released-or-unknown(%#x)", h)
}

func (f *API) record(format string, args ...any) {
	f.Calls = append(f.Calls, fmt.Sprintf(format, args...))
}

// create answers a function that makes an object of kind from arg
// (fn(arg, &status)): a new handle, or NULL with the status Fail gives.
func (f *API) create(fn, kind, arg string) (uintptr, vmnet.Status) {
	st := f.status(fn)
	if st != vmnet.Success {
		f.record("%s(%s, &status) = NULL, %s", fn, arg, st)
		return 0, st
	}
	h := f.handle(kind)
	f.record("%s = %s(%s, &status) [%s]", f.name(h), fn, arg, st)
	return h, st
}

func (f *API) ConfigurationCreate(mode vmnet.Mode) (vmnet.Configuration, vmnet.Status) {
	h, st := f.create("vmnet_network_configuration_create", "cfg", mode.String())
	return vmnet.Configuration(h), st
}

func (f *API) ConfigurationSetIPv4Subnet(cfg vmnet.Configuration, addr, mask netip.Addr) vmnet.Status {
	fn := "vmnet_network_configuration_set_ipv4_subnet"
	st := f.status(fn)
	m := mask.As4()
	ones, _ := net.IPMask(m[:]).Size()
	subnet := netip.PrefixFrom(addr, ones).Masked()
	// A refusal of the first host only: "first-host" fails the gateway
	// form and takes the network address.
	if s, ok := f.Fail[fn+"/first-host"]; ok && subnet.Addr() != addr {
		st = s
	}
	f.record("vmnet_network_configuration_set_ipv4_subnet(%s, %s, %s) = %s", f.name(uintptr(cfg)), addr, mask, st)
	if st == vmnet.Success {
		f.setSubnet = subnet
	}
	return st
}

func (f *API) ConfigurationSetIPv6Prefix(cfg vmnet.Configuration, prefix netip.Addr, bits uint8) vmnet.Status {
	st := f.status("vmnet_network_configuration_set_ipv6_prefix")
	f.record("vmnet_network_configuration_set_ipv6_prefix(%s, %s, %d) = %s", f.name(uintptr(cfg)), prefix, bits, st)
	if st == vmnet.Success {
		f.setIPv6 = netip.PrefixFrom(prefix, int(bits))
	}
	return st
}

func (f *API) ConfigurationSetMTU(cfg vmnet.Configuration, mtu uint32) vmnet.Status {
	st := f.status("vmnet_network_configuration_set_mtu")
	f.record("vmnet_network_configuration_set_mtu(%s, %d) = %s", f.name(uintptr(cfg)), mtu, st)
	return st
}

func (f *API) ConfigurationAddDHCPReservation(cfg vmnet.Configuration, mac [6]byte, addr netip.Addr) vmnet.Status {
	fn := "vmnet_network_configuration_add_dhcp_reservation"
	st := f.status(fn)
	if s, ok := f.Fail[fn+"/"+addr.String()]; ok {
		st = s
	}
	f.record("%s(%s, %s, %s) = %s", fn, f.name(uintptr(cfg)), net.HardwareAddr(mac[:]), addr, st)
	return st
}

func (f *API) ConfigurationDisableNAT44(cfg vmnet.Configuration) {
	f.record("vmnet_network_configuration_disable_nat44(%s)", f.name(uintptr(cfg)))
}

func (f *API) ConfigurationDisableNAT66(cfg vmnet.Configuration) {
	f.record("vmnet_network_configuration_disable_nat66(%s)", f.name(uintptr(cfg)))
}

func (f *API) NetworkCreate(cfg vmnet.Configuration) (vmnet.Network, vmnet.Status) {
	h, st := f.create("vmnet_network_create", "net", f.name(uintptr(cfg)))
	return vmnet.Network(h), st
}

// NetworkGetIPv4Subnet reports the network address and mask of Subnet, or
// of what was set.
func (f *API) NetworkGetIPv4Subnet(n vmnet.Network) (netip.Addr, netip.Addr) {
	p := f.setSubnet
	if f.Subnet.IsValid() {
		p = f.Subnet
	}
	var addr, mask netip.Addr
	if p.IsValid() {
		addr, mask = p.Addr(), maskOf(p)
	}
	f.record("vmnet_network_get_ipv4_subnet(%s, &addr, &mask) -> %s, %s", f.name(uintptr(n)), addr, mask)
	return addr, mask
}

func (f *API) NetworkGetIPv6Prefix(n vmnet.Network) (netip.Addr, uint8) {
	p := f.setIPv6
	if f.IPv6.IsValid() {
		p = f.IPv6
	}
	f.record("vmnet_network_get_ipv6_prefix(%s, &prefix, &len) -> %s, %d", f.name(uintptr(n)), p.Addr(), p.Bits())
	return p.Addr(), uint8(p.Bits())
}

func (f *API) NetworkCopySerialization(n vmnet.Network) (vmnet.XPCObject, vmnet.Status) {
	h, st := f.create("vmnet_network_copy_serialization", "xpc", f.name(uintptr(n)))
	return vmnet.XPCObject(h), st
}

func (f *API) Release(obj uintptr) {
	f.record("CFRelease(%s)", f.name(obj))
	delete(f.live, obj)
}

func (f *API) XPCRelease(obj vmnet.XPCObject) {
	f.record("xpc_release(%s)", f.name(uintptr(obj)))
	delete(f.live, uintptr(obj))
}

// Transcript is the calls, one per line, and what is still held.
func (f *API) Transcript() string {
	var b strings.Builder
	for _, c := range f.Calls {
		b.WriteString(c + "\n")
	}
	if held := f.Held(); len(held) > 0 {
		fmt.Fprintf(&b, "# held: %s\n", strings.Join(held, ", "))
	}
	return b.String()
}

func maskOf(p netip.Prefix) netip.Addr {
	m := net.CIDRMask(p.Bits(), 32)
	return netip.AddrFrom4([4]byte(m))
}

var _ vmnet.API = (*API)(nil)

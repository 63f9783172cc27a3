package leases

// A VM's identity: leases whose addresses and MAC belong to a VM rather
// than to one pod of it (Lease.VMName, from the pod annotation vmlane.io/vm).

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// DefaultVMHold is how long a VM's addresses stay held once its last pod on
// the node goes. A day outlasts what takes a VM's pod away and brings it
// back: a node's reboot or kernel upgrade (minutes), a drain and its
// maintenance (hours), a VM an operator stops in the evening and starts in
// the morning. What it costs is an address of the node's pod subnet kept
// out of use for that day after a VM is deleted for good; `vmlanectl claims
// release` gives it back at once.
const DefaultVMHold = 24 * time.Hour

// VMName joins a pod's namespace and the name its vmlane.io/vm annotation
// gives into the VM's identity, "NAMESPACE/NAME", after checking both: a
// namespace is a DNS label, a VM's name a DNS subdomain (what Kubernetes
// allows for the names of KubeVirt's VirtualMachines and of pods).
func VMName(namespace, name string) (string, error) {
	if err := checkDNSLabel(namespace); err != nil {
		return "", fmt.Errorf("namespace %q: %w", namespace, err)
	}
	if err := checkDNSSubdomain(name); err != nil {
		return "", fmt.Errorf("VM name %q: %w", name, err)
	}
	return namespace + "/" + name, nil
}

// ParseVMName checks a "NAMESPACE/NAME" identity as VMName makes it.
func ParseVMName(s string) (string, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok {
		return "", fmt.Errorf("VM %q: want NAMESPACE/NAME", s)
	}
	return VMName(ns, name)
}

func checkDNSLabel(s string) error {
	if len(s) == 0 || len(s) > 63 {
		return fmt.Errorf("must be 1 to 63 characters, not %d", len(s))
	}
	return checkDNSChars(s, false)
}

func checkDNSSubdomain(s string) error {
	if len(s) == 0 || len(s) > 253 {
		return fmt.Errorf("must be 1 to 253 characters, not %d", len(s))
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("each dot-separated part must be 1 to 63 characters")
		}
	}
	return checkDNSChars(s, true)
}

// checkDNSChars: lowercase letters, digits and '-' (and '.' in a
// subdomain), starting and ending with a letter or digit.
func checkDNSChars(s string, dots bool) error {
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case alnum(c):
		case c == '-' && i > 0 && i < len(s)-1:
		case c == '.' && dots && alnum(s[i-1]) && i < len(s)-1 && alnum(s[i+1]):
		default:
			return fmt.Errorf("character %d (%q): only lowercase letters, digits, '-'%s, starting and ending with a letter or digit", i, c, map[bool]string{true: " and '.'"}[dots])
		}
	}
	return nil
}

// takeOverVM gives req's attachment the lease its VM already has on the
// node: one held since the VM's last pod went, or one whose attachment
// req.Stale says is gone. ok is false when the VM has no lease here.
func (tx *Tx) takeOverVM(req ReserveRequest) (Lease, bool, error) {
	i := slices.IndexFunc(tx.f.Leases, func(l Lease) bool { return l.VMName == req.VMName })
	if i < 0 {
		return Lease{}, false, nil
	}
	l := &tx.f.Leases[i]
	switch {
	case !l.Known():
		return Lease{}, true, fmt.Errorf("%w: VM %s's addresses are held by %s", ErrConflict, req.VMName, describe(*l))
	case l.State != StateHeld && (req.Stale == nil || !req.Stale(*l)):
		return Lease{}, true, fmt.Errorf("%w: VM %s is attached as pod %s/%s (attachment %s, netns %s) on this node; a second pod of the VM may run only on another node, as a migration's target",
			ErrVMInUse, req.VMName, l.Pod.Namespace, l.Pod.Name, l.Key(), l.NetNS)
	case req.IP.IsValid() && req.IP != l.IP, req.IP6.IsValid() && req.IP6 != l.IP6, req.MAC != "" && req.MAC != l.MAC:
		return Lease{}, true, fmt.Errorf("%w: VM %s holds %s %s %s, the request asks for %s %s %s",
			ErrConflict, req.VMName, l.IP, l.IP6, l.MAC, req.IP, req.IP6, req.MAC)
	}
	tx.mustWrite()
	l.State, l.Expires, l.State6, l.Expires6 = StateReserved, time.Time{}, "", time.Time{}
	l.ContainerID, l.IfName, l.NetNS, l.BridgePort = req.Key.ContainerID, req.Key.IfName, req.NetNS, req.BridgePort
	l.VM, l.Pod, l.Hostname = req.VM, req.Pod, req.Hostname
	if !l.IP6.IsValid() && tx.dualStack(req) {
		ip6, err := tx.reserve6(req)
		if err != nil {
			return Lease{}, true, err
		}
		l.IP6 = ip6
	}
	return *l, true, nil
}

// hold turns lease i, a VM's whose attachment went, into its held lease:
// the addresses and MAC stay, the attachment and what DHCP made of them go,
// and it expires after the store's VM hold time.
func (tx *Tx) hold(i int) {
	d := DefaultVMHold
	if tx.s != nil {
		d = tx.s.vmHold
	}
	l := &tx.f.Leases[i]
	l.State, l.Expires = StateHeld, normTime(tx.now.Add(d))
	l.State6, l.Expires6 = "", time.Time{}
	l.ContainerID, l.IfName, l.NetNS, l.BridgePort = "", "", "", ""
}

// ReleaseVM gives back the addresses held for a VM whose pod went. A VM
// attached to a pod keeps them (its DEL holds them, then ReleaseVM frees
// them) and is ErrVMInUse.
func (tx *Tx) ReleaseVM(vm string) (Lease, bool, error) {
	i := slices.IndexFunc(tx.f.Leases, func(l Lease) bool { return l.VMName == vm })
	if i < 0 {
		return Lease{}, false, nil
	}
	l := tx.f.Leases[i]
	if l.State != StateHeld {
		return l, false, fmt.Errorf("%w: VM %s is attached as %s; it is released when that pod goes and its hold time ends", ErrVMInUse, vm, describe(l))
	}
	tx.mustWrite()
	tx.f.Leases = slices.Delete(tx.f.Leases, i, i+1)
	return l, true, nil
}

// moveIn reserves a VM's addresses that belong to another node's pod
// subnets (req.Home, req.Home6), for a VM whose claim says it has them:
// its pod has come to this node. Nothing here may hold them already.
func (tx *Tx) moveIn(req ReserveRequest) (Lease, error) {
	f := tx.f
	if req.VMName == "" || !req.IP.IsValid() || req.MAC == "" {
		return Lease{}, fmt.Errorf("moving VM %q in from %s needs its ip and mac", req.VMName, req.Home)
	}
	ip := req.IP.Unmap()
	if err := checkHome(ip, req.Home, f.Subnet, "ip", "home", "subnet"); err != nil {
		return Lease{}, fmt.Errorf("VM %s's claim: %w", req.VMName, err)
	}
	if req.IP6.IsValid() {
		if !req.Home6.IsValid() {
			return Lease{}, fmt.Errorf("VM %s's claim: ip6 %s without its home6", req.VMName, req.IP6)
		}
		if err := checkHome(req.IP6, req.Home6, f.Subnet6, "ip6", "home6", "subnet6"); err != nil {
			return Lease{}, fmt.Errorf("VM %s's claim: %w", req.VMName, err)
		}
	}
	for _, l := range f.Leases {
		switch {
		case l.IP == ip:
			return Lease{}, fmt.Errorf("VM %s's ip %s: %w by %s", req.VMName, ip, ErrInUse, describe(l))
		case req.IP6.IsValid() && l.IP6 == req.IP6:
			return Lease{}, fmt.Errorf("VM %s's ip6 %s: %w by %s", req.VMName, req.IP6, ErrInUse, describe(l))
		case l.MAC == req.MAC && holdsMAC(l):
			return Lease{}, fmt.Errorf("VM %s's MAC %s: %w by %s", req.VMName, req.MAC, ErrInUse, describe(l))
		}
	}
	l := Lease{
		MAC: req.MAC, IP: ip, IP6: req.IP6, Home: req.Home,
		State: StateReserved, Source: req.Source,
		ContainerID: req.Key.ContainerID, IfName: req.Key.IfName, NetNS: req.NetNS, BridgePort: req.BridgePort,
		VM: req.VM, VMName: req.VMName, Pod: req.Pod, Hostname: req.Hostname, Created: tx.now,
	}
	if req.IP6.IsValid() { // a home6 without an ip6 is nothing's
		l.Home6 = req.Home6
	}
	tx.mustWrite()
	f.Leases = append(f.Leases, l)
	return l, nil
}

// HoldFor keeps a VM's addresses of this node's subnets (ip, and ip6 when
// valid) and its MAC held for it while it runs on another node: a held
// lease, made now or found, whose hold time starts again now once half of
// it has passed. A lease of
// the VM attached here is left as it is (its pod is here: the claim is
// about to say so); addresses or a MAC another lease holds are ErrInUse.
func (tx *Tx) HoldFor(vm string, ip, ip6 netip.Addr, mac string) error {
	mac, err := NormalizeMAC(mac)
	if err != nil {
		return err
	}
	d := DefaultVMHold
	if tx.s != nil {
		d = tx.s.vmHold
	}
	until := normTime(tx.now.Add(d))
	if i := slices.IndexFunc(tx.f.Leases, func(l Lease) bool { return l.VMName == vm }); i >= 0 {
		l := &tx.f.Leases[i]
		// Renewed once half the hold time has passed, not at every call:
		// each renewal is a write of the file.
		if l.State == StateHeld && l.IP == ip && l.Expires.Sub(tx.now) < d/2 {
			tx.mustWrite()
			l.Expires = until
		}
		return nil
	}
	if !tx.f.Subnet.Contains(ip) || (ip6.IsValid() && !tx.f.Subnet6.Contains(ip6)) {
		return fmt.Errorf("VM %s's %s %s is not of this node's subnets", vm, ip, ip6)
	}
	for _, l := range tx.f.Leases {
		switch {
		case l.IP == ip, ip6.IsValid() && l.IP6 == ip6:
			return fmt.Errorf("VM %s's address %s: %w by %s", vm, ip, ErrInUse, describe(l))
		case l.MAC == mac && holdsMAC(l):
			return fmt.Errorf("VM %s's MAC %s: %w by %s", vm, mac, ErrInUse, describe(l))
		}
	}
	tx.mustWrite()
	tx.f.Leases = append(tx.f.Leases, Lease{MAC: mac, IP: ip, IP6: ip6, State: StateHeld, Source: SourceCNI, VMName: vm, VM: true, Created: tx.now, Expires: until})
	return nil
}

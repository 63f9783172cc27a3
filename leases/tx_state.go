package leases

// A transaction's lookups, and the changes of state after a reservation:
// release, bind (a DHCP ACK) and decline.

import (
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// Get returns the lease of a CNI attachment, unless its state is one this
// version does not know.
func (tx *Tx) Get(key Key) (Lease, bool) {
	for _, l := range tx.f.Leases {
		if l.Source == SourceCNI && l.State.Known() && l.Key() == key {
			return l, true
		}
	}
	return Lease{}, false
}

// SetBridgePort records port as the anti-spoofed bridge port of key's CNI
// lease, which has none: vmlaned fills it in for the leases a plugin from
// before anti-spoofing wrote. ok is false when key has no such lease.
func (tx *Tx) SetBridgePort(key Key, port string) (l Lease, ok bool) {
	for i := range tx.f.Leases {
		l := &tx.f.Leases[i]
		if l.Source == SourceCNI && l.State.Known() && l.Key() == key && l.BridgePort == "" {
			tx.mustWrite()
			l.BridgePort = port
			return *l, true
		}
	}
	return Lease{}, false
}

// ByMAC returns the live lease of a MAC ([Lease.Live]): neither declined
// nor held, and of a state and source this version knows.
func (tx *Tx) ByMAC(mac string) (Lease, bool) {
	mac, err := NormalizeMAC(mac)
	if err != nil {
		return Lease{}, false
	}
	for _, l := range tx.f.Leases {
		if l.MAC == mac && l.Live() {
			return l, true
		}
	}
	return Lease{}, false
}

// ByIP returns the lease that holds an address of either family, whatever
// it is: declined, or of a state or source this version does not know
// ([Lease.Known]).
func (tx *Tx) ByIP(ip netip.Addr) (Lease, bool) {
	if i := tx.indexOfAddr(ip); i >= 0 {
		return tx.f.Leases[i], true
	}
	return Lease{}, false
}

// indexOfIP finds the lease whose IPv4 address is ip, or -1.
func (tx *Tx) indexOfIP(ip netip.Addr) int {
	ip = ip.Unmap()
	for i, l := range tx.f.Leases {
		if l.IP == ip {
			return i
		}
	}
	return -1
}

// indexOfAddr finds the lease that holds ip, of either family, or -1.
func (tx *Tx) indexOfAddr(ip netip.Addr) int {
	if ip = ip.Unmap(); ip.Is4() {
		return tx.indexOfIP(ip)
	}
	for i, l := range tx.f.Leases {
		if l.IP6 == ip {
			return i
		}
	}
	return -1
}

// Leases returns a copy of every lease, sorted by IP.
func (tx *Tx) Leases() []Lease {
	tx.f.sort()
	return slices.Clone(tx.f.Leases)
}

// Release frees the lease of a CNI attachment. Releasing what is not held is
// not an error (CNI DEL must succeed when there is nothing left to delete).
// A lease in a state this version does not know stays, for a version that
// knows what the state means: the address stays held meanwhile, the safe
// side.
//
// A VM's lease (VMName) is not freed but held for the VM ([Tx.hold]).
func (tx *Tx) Release(key Key) (Lease, bool) {
	for i, l := range tx.f.Leases {
		if l.Source == SourceCNI && l.State.Known() && l.State != StateHeld && l.Key() == key {
			tx.mustWrite()
			if l.VMName != "" {
				tx.hold(i)
			} else {
				tx.f.Leases = slices.Delete(tx.f.Leases, i, i+1)
			}
			return l, true
		}
	}
	return Lease{}, false
}

// ReleaseMAC handles a DHCP client giving up its address (DHCPRELEASE): a
// DHCP lease is removed; a CNI reservation stays held for its pod and goes
// back to reserved. Declined leases and leases this version does not know
// are not the client's to give up.
func (tx *Tx) ReleaseMAC(mac string) (Lease, bool) {
	mac, err := NormalizeMAC(mac)
	if err != nil {
		return Lease{}, false
	}
	for i, l := range tx.f.Leases {
		if l.MAC != mac || !l.Live() {
			continue
		}
		tx.mustWrite()
		if l.Source == SourceDHCP {
			tx.f.Leases = slices.Delete(tx.f.Leases, i, i+1)
			return l, true
		}
		tx.f.Leases[i].State, tx.f.Leases[i].Expires = StateReserved, time.Time{}
		return tx.f.Leases[i], true
	}
	return Lease{}, false
}

// Bind records that the DHCP server ACKed ip to mac until expires. The
// address must be held (reserved by CNI or offered) for that MAC; a lease
// without a MAC takes this one.
func (tx *Tx) Bind(mac string, ip netip.Addr, expires time.Time, hostname string) (Lease, error) {
	mac, err := NormalizeMAC(mac)
	if err != nil {
		return Lease{}, err
	}
	i := tx.indexOfIP(ip)
	if i < 0 {
		return Lease{}, fmt.Errorf("binding %s to %s: %w", ip, mac, ErrNotFound)
	}
	l := &tx.f.Leases[i]
	switch {
	case !l.Known():
		return Lease{}, fmt.Errorf("binding %s to %s: %w: it is held by %s", ip, mac, ErrConflict, describe(*l))
	case l.State == StateDeclined:
		return Lease{}, fmt.Errorf("binding %s to %s: %w: the address is quarantined until %s", ip, mac, ErrConflict, l.Expires.Format(time.RFC3339))
	case l.State == StateHeld:
		return Lease{}, fmt.Errorf("binding %s to %s: %w: the address is held for VM %s, which has no attachment here", ip, mac, ErrConflict, l.VMName)
	case l.MAC != "" && l.MAC != mac:
		return Lease{}, fmt.Errorf("binding %s to %s: %w: it is held for MAC %s", ip, mac, ErrConflict, l.MAC)
	}
	expires = normTime(expires)
	if l.MAC != mac || l.State != StateBound || !l.Expires.Equal(expires) || (hostname != "" && l.Hostname != hostname) {
		tx.mustWrite()
		l.MAC, l.State, l.Expires = mac, StateBound, expires
		if hostname != "" {
			l.Hostname = hostname
		}
	}
	return *l, nil
}

// Decline quarantines ip until until, because a client found it in use by
// someone else (DHCPDECLINE, RFC 2131 §4.3.3). A CNI reservation keeps its
// attachment, so DEL still releases it; an address that no lease held gets
// a quarantine lease of its own. An address held by a lease this version
// does not know is left to it (ErrConflict).
func (tx *Tx) Decline(ip netip.Addr, mac string, until time.Time) (Lease, error) {
	if mac != "" {
		m, err := NormalizeMAC(mac)
		if err != nil {
			return Lease{}, err
		}
		mac = m
	}
	ip = ip.Unmap()
	if !poolOf(tx.f.Subnet).contains(ip) || ip == tx.f.Gateway {
		return Lease{}, fmt.Errorf("declined ip %s is not a usable address of %s", ip, tx.f.Subnet)
	}
	until = normTime(until)
	i := tx.indexOfIP(ip)
	if i >= 0 && (!tx.f.Leases[i].Known() || tx.f.Leases[i].State == StateHeld) {
		return Lease{}, fmt.Errorf("decline of %s: %w: it is held by %s", ip, ErrConflict, describe(tx.f.Leases[i]))
	}
	tx.mustWrite()
	if i >= 0 {
		l := &tx.f.Leases[i]
		if mac != "" && l.MAC != "" && l.MAC != mac {
			return Lease{}, fmt.Errorf("decline of %s from %s: %w: it is held for MAC %s", ip, mac, ErrConflict, l.MAC)
		}
		l.State, l.Expires = StateDeclined, until
		return *l, nil
	}
	l := Lease{MAC: mac, IP: ip, State: StateDeclined, Source: SourceDHCP, Created: tx.now, Expires: until}
	tx.f.Leases = append(tx.f.Leases, l)
	return l, nil
}

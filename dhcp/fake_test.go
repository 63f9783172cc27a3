package dhcp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/vmlane/vmlane/leases"
)

// fakeAlloc is an in-memory Allocator that records every call in the
// order it came, as one line each.
type fakeAlloc struct {
	mu     sync.Mutex
	leases map[string]leases.Lease // by MAC
	calls  []string
	err    error // returned by every method when set
}

func newFake(ls ...leases.Lease) *fakeAlloc {
	f := &fakeAlloc{leases: map[string]leases.Lease{}}
	for _, l := range ls {
		f.leases[l.MAC] = l
	}
	return f
}

func (f *fakeAlloc) record(format string, args ...any) {
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

func (f *fakeAlloc) Lookup(mac net.HardwareAddr) (leases.Lease, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return leases.Lease{}, false, f.err
	}
	l, ok := f.leases[mac.String()]
	if ok && l.State == leases.StateDeclined {
		return leases.Lease{}, false, nil
	}
	return l, ok, nil
}

func (f *fakeAlloc) Allocate(mac net.HardwareAddr, want netip.Addr, pool leases.Pool, hold time.Time) (leases.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("allocate %s want=%v pool=%s hold=%s", mac, want, pool, hold.UTC().Format(time.RFC3339))
	if f.err != nil {
		return leases.Lease{}, f.err
	}
	if l, ok := f.leases[mac.String()]; ok && l.State != leases.StateDeclined {
		return l, nil
	}
	held := map[netip.Addr]bool{}
	for _, l := range f.leases {
		held[l.IP] = true
	}
	pick := netip.Addr{}
	if want.IsValid() && inPool(pool, want) && !held[want] {
		pick = want
	}
	for a := pool.First; !pick.IsValid() && a.Compare(pool.Last) <= 0; a = a.Next() {
		if !held[a] {
			pick = a
		}
	}
	if !pick.IsValid() {
		return leases.Lease{}, leases.ErrExhausted
	}
	l := leases.Lease{MAC: mac.String(), IP: pick, State: leases.StateReserved, Source: leases.SourceDHCP, Expires: hold}
	f.leases[l.MAC] = l
	return l, nil
}

func (f *fakeAlloc) Bind(mac net.HardwareAddr, ip netip.Addr, expires time.Time, hostname string) (leases.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("bind %s %s until=%s host=%q", mac, ip, expires.UTC().Format(time.RFC3339), hostname)
	if f.err != nil {
		return leases.Lease{}, f.err
	}
	l, ok := f.leases[mac.String()]
	if !ok || l.IP != ip {
		return leases.Lease{}, leases.ErrNotFound
	}
	l.State, l.Expires = leases.StateBound, expires
	if hostname != "" {
		l.Hostname = hostname
	}
	f.leases[l.MAC] = l
	return l, nil
}

func (f *fakeAlloc) Release(mac net.HardwareAddr) (leases.Lease, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("release %s", mac)
	if f.err != nil {
		return leases.Lease{}, false, f.err
	}
	l, ok := f.leases[mac.String()]
	if !ok {
		return l, false, nil
	}
	if l.Source == leases.SourceDHCP {
		delete(f.leases, l.MAC)
	} else {
		l.State, l.Expires = leases.StateReserved, time.Time{}
		f.leases[l.MAC] = l
	}
	return l, true, nil
}

func (f *fakeAlloc) Decline(mac net.HardwareAddr, ip netip.Addr, until time.Time) (leases.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("decline %s %s until=%s", mac, ip, until.UTC().Format(time.RFC3339))
	if f.err != nil {
		return leases.Lease{}, f.err
	}
	l, ok := f.leases[mac.String()]
	if !ok || l.IP != ip {
		return leases.Lease{}, errors.New("not held")
	}
	l.State, l.Expires = leases.StateDeclined, until
	f.leases[l.MAC] = l
	return l, nil
}

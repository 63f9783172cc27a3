package leases

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Snapshot is a lease file as it was when read.
//
// Lookups scan the leases: on a 4,096-lease file a scan costs microseconds,
// less than building an index that a runtime would use for one lookup.
type Snapshot struct {
	// File is the parsed file. For a bootpd file only Leases is set, in
	// the file's order (newest first).
	File File
	now  time.Time
}

// Read reads a lease file without locking it. It reads vmlane's JSON lease
// file and, so that a VM runtime has one API on both systems, macOS bootpd's
// /var/db/dhcpd_leases (told apart by their first bytes). An empty path is
// NodePath: bootpd's file on macOS, vmlane's elsewhere.
func Read(path string) (*Snapshot, error) {
	if path == "" {
		path = NodePath
	}
	data, err := readFileString(path)
	if err != nil {
		return nil, fmt.Errorf("lease file %s: %w", path, err)
	}
	s, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("lease file %s: %w", path, err)
	}
	return s, nil
}

func parse(data string) (*Snapshot, error) {
	if isBootpd(data) {
		ls, err := ParseBootpd(strings.NewReader(data))
		if err != nil {
			return nil, err
		}
		return NewSnapshot(File{Leases: ls}), nil
	}
	f, err := decodeString(data)
	if err != nil {
		return nil, err
	}
	return NewSnapshot(*f), nil
}

// isBootpd tells bootpd's format ("{\n\tname=...") from JSON ("{\"version\"").
func isBootpd(data string) bool {
	data = strings.TrimLeft(data, " \t\r\n")
	if len(data) == 0 || data[0] != '{' {
		return false
	}
	rest := strings.TrimLeft(data[1:], " \t\r\n")
	return len(rest) > 0 && rest[0] != '"' && rest[0] != '}'
}

// NewSnapshot wraps f for lookups.
func NewSnapshot(f File) *Snapshot {
	return &Snapshot{File: f, now: time.Now()}
}

// At returns a copy of the snapshot that judges expiry at now instead of at
// the time it was read.
func (s *Snapshot) At(now time.Time) *Snapshot {
	c := *s
	c.now = now
	return &c
}

// Leases returns every lease in the snapshot.
func (s *Snapshot) Leases() []Lease { return s.File.Leases }

// ByMAC returns the lease of a VM's MAC, in any accepted spelling. Declined,
// held and expired leases are not returned: their address is not in use
// by the MAC now ([Lease.Live]); nor
// are leases of a state or source this version does not know, whose
// meaning it cannot tell ([Lease.Known]). When
// a MAC has several leases (bootpd keeps old ones), the first in the file
// wins: bootpd lists the newest first.
//
// In bootpd's file, a guest chooses its client identifier, so a DUID-LL
// carrying another guest's MAC makes a record that names that MAC too: a
// record keyed by the hardware address wins over one keyed by an
// identifier, and when two live records of the same kind name one MAC
// with different addresses there is no answer ([Snapshot.LookupMAC] says
// why).
func (s *Snapshot) ByMAC(mac string) (Lease, bool) {
	l, err := s.LookupMAC(mac)
	return l, err == nil
}

// ErrNoLease is LookupMAC's answer for a MAC no live lease names.
var ErrNoLease = errors.New("no live lease")

// ErrAmbiguousMAC is LookupMAC's answer for a MAC that two live leases of
// bootpd's name with different addresses: one of them is another guest's
// forged client identifier, and which is not knowable from the file.
var ErrAmbiguousMAC = errors.New("two live leases name the MAC")

// LookupMAC is ByMAC with the reason for no answer: ErrNoLease, or
// ErrAmbiguousMAC with the addresses and names of the records.
func (s *Snapshot) LookupMAC(mac string) (Lease, error) {
	m, err := NormalizeMAC(mac)
	if err != nil {
		return Lease{}, err
	}
	var byHW, byID []*Lease
	for i := range s.File.Leases {
		l := &s.File.Leases[i]
		if l.MAC != m || !l.Live() {
			continue
		}
		if l.Expired(s.now) {
			// The newest record of the MAC has expired: what older
			// ones say is older still.
			if len(byHW)+len(byID) == 0 && !l.MACFromClientID {
				return Lease{}, ErrNoLease
			}
			continue
		}
		if l.MACFromClientID {
			byID = append(byID, l)
		} else {
			byHW = append(byHW, l)
		}
	}
	for _, ls := range [][]*Lease{byHW, byID} {
		if len(ls) == 0 {
			continue
		}
		for _, o := range ls[1:] {
			if o.IP != ls[0].IP {
				return Lease{}, fmt.Errorf("%w: %s (%s) and %s (%s)", ErrAmbiguousMAC, ls[0].IP, ls[0].Hostname, o.IP, o.Hostname)
			}
		}
		return *ls[0], nil
	}
	return Lease{}, ErrNoLease
}

// ByIP returns the lease that holds an address of either family (ip or
// ip6), whatever its state, even
// one this version does not know: check [Lease.Known] before using it.
func (s *Snapshot) ByIP(ip netip.Addr) (Lease, bool) {
	ip = ip.Unmap()
	v4 := ip.Is4()
	for _, l := range s.File.Leases {
		if (v4 && l.IP == ip) || (!v4 && l.IP6.IsValid() && l.IP6 == ip) {
			return l, true
		}
	}
	return Lease{}, false
}

// ByPod returns the leases of a pod (one per attachment), whatever their
// state: declined ones and ones this version does not know included, so
// check State and [Lease.Known] before using one's address.
func (s *Snapshot) ByPod(namespace, name string) []Lease {
	var out []Lease
	for _, l := range s.File.Leases {
		if l.Pod.Namespace == namespace && l.Pod.Name == name {
			out = append(out, l)
		}
	}
	return out
}

// CompatLease is one entry of the cocoon-net compatible export.
type CompatLease struct {
	MAC    string    `json:"mac"`
	IP     string    `json:"ip"`
	Expiry time.Time `json:"expiry"`
}

// compatForever stands in for the expiry of reservations that last until
// released, which the compat format cannot express.
var compatForever = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

// Compat returns the live leases that have a MAC in the cocoon-net format:
// neither declined, nor expired, nor of a state or source this version does
// not know. Reservations held until released get the expiry
// 9999-12-31T23:59:59Z.
func (s *Snapshot) Compat() []CompatLease {
	out := make([]CompatLease, 0, len(s.File.Leases))
	for _, l := range s.File.Leases {
		if l.MAC == "" || !l.Live() || l.Expired(s.now) {
			continue
		}
		exp := l.Expires
		if exp.IsZero() {
			exp = compatForever
		}
		out = append(out, CompatLease{MAC: l.MAC, IP: l.IP.String(), Expiry: exp.UTC()})
	}
	return out
}

package leases

// The decoder's fields of the lease file: typed members of an object, a
// lease, and the file.

import (
	"errors"
	"fmt"
	"net/netip"
	"time"
)

func (d *decoder) strField(dst *string, name string) error {
	if d.null() {
		return nil
	}
	v, err := d.str()
	if err != nil {
		return fmt.Errorf("%q: %w", name, err)
	}
	*dst = v
	return nil
}

func (d *decoder) boolField(dst *bool, name string) error {
	d.ws()
	switch lit, _ := d.literal(); lit {
	case "null":
	case "true":
		*dst = true
	case "false":
		*dst = false
	default:
		return fmt.Errorf("%q: %w", name, d.errorf("want true or false"))
	}
	return nil
}

func (d *decoder) addrField(dst *netip.Addr, name string) error {
	return parsedField(d, dst, name, netip.ParseAddr)
}

func (d *decoder) prefixField(dst *netip.Prefix, name string) error {
	return parsedField(d, dst, name, netip.ParsePrefix)
}

// parsedField reads a string member through parse into dst: null leaves
// dst as it is, "" makes it zero, as encoding/json's TextUnmarshaler
// handling of netip's types does.
func parsedField[T any](d *decoder, dst *T, name string, parse func(string) (T, error)) error {
	if d.null() {
		return nil
	}
	v, err := d.str()
	if err != nil {
		return fmt.Errorf("%q: %w", name, err)
	}
	if v == "" {
		var zero T
		*dst = zero
		return nil
	}
	x, err := parse(v)
	if err != nil {
		return fmt.Errorf("%q: %w", name, err)
	}
	*dst = x
	return nil
}

func (d *decoder) timeField(dst *time.Time, name string) error {
	if d.null() {
		return nil
	}
	start := d.pos
	v, err := d.str()
	if err != nil {
		return fmt.Errorf("%q: %w", name, err)
	}
	if t, ok := parseUTCSeconds(v); ok && d.pos-start == len(v)+2 {
		*dst = t
		return nil
	}
	// encoding/json hands time.Time's UnmarshalJSON the raw token, escapes
	// and all, and it is strict RFC 3339: do exactly the same.
	if err := dst.UnmarshalJSON([]byte(d.s[start:d.pos])); err != nil {
		return fmt.Errorf("%q: %w", name, err)
	}
	return nil
}

// parseUTCSeconds parses the one form the store writes,
// "2006-01-02T15:04:05Z", without the general RFC 3339 parser. Anything else
// (or an out-of-range field) returns false for the general path.
func parseUTCSeconds(s string) (time.Time, bool) {
	if len(s) != 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' || s[19] != 'Z' {
		return time.Time{}, false
	}
	num := func(i, n int) int {
		v := 0
		for _, c := range []byte(s[i : i+n]) {
			if c < '0' || c > '9' {
				return -1
			}
			v = v*10 + int(c-'0')
		}
		return v
	}
	y, mo, dd, h, mi, sec := num(0, 4), num(5, 2), num(8, 2), num(11, 2), num(14, 2), num(17, 2)
	if y < 0 || mo < 1 || mo > 12 || dd < 1 || dd > 31 || h < 0 || h > 23 || mi < 0 || mi > 59 || sec < 0 || sec > 59 {
		return time.Time{}, false
	}
	t := time.Date(y, time.Month(mo), dd, h, mi, sec, 0, time.UTC)
	if t.Day() != dd { // Feb 30 and the like: let the strict parser reject it
		return time.Time{}, false
	}
	return t, true
}

func (d *decoder) lease(l *Lease) error {
	// The switch matches exact keys, the writer's, at once; only a key it
	// does not know is tried case-insensitively (as encoding/json would)
	// and dispatched again. A lease has some 17 keys and a file thousands
	// of leases: a loop over the names for every key cost a third of a
	// Read.
	var field func(key string) error
	field = func(key string) error {
		switch key {
		case "mac":
			return d.strField(&l.MAC, "mac")
		case "ip":
			return d.addrField(&l.IP, "ip")
		case "ip6":
			return d.addrField(&l.IP6, "ip6")
		case "state6":
			return d.strField((*string)(&l.State6), "state6")
		case "expires6":
			return d.timeField(&l.Expires6, "expires6")
		case "state":
			return d.strField((*string)(&l.State), "state")
		case "source":
			return d.strField((*string)(&l.Source), "source")
		case "containerID":
			return d.strField(&l.ContainerID, "containerID")
		case "ifname":
			return d.strField(&l.IfName, "ifname")
		case "netns":
			return d.strField(&l.NetNS, "netns")
		case "bridgePort":
			return d.strField(&l.BridgePort, "bridgePort")
		case "vm":
			return d.boolField(&l.VM, "vm")
		case "vmName":
			return d.strField(&l.VMName, "vmName")
		case "home":
			return d.prefixField(&l.Home, "home")
		case "home6":
			return d.prefixField(&l.Home6, "home6")
		case "hostname":
			return d.strField(&l.Hostname, "hostname")
		case "created":
			return d.timeField(&l.Created, "created")
		case "expires":
			return d.timeField(&l.Expires, "expires")
		case "pod":
			if d.null() {
				return nil
			}
			return d.object(func(key string) error {
				switch fold(key, podKeys...) {
				case "namespace":
					return d.strField(&l.Pod.Namespace, "namespace")
				case "name":
					return d.strField(&l.Pod.Name, "name")
				case "uid":
					return d.strField(&l.Pod.UID, "uid")
				}
				return d.keep(&l.Pod.Unknown)
			})
		}
		if k := foldCase(key, leaseKeys...); k != key {
			return field(k)
		}
		return d.keep(&l.Unknown)
	}
	return d.object(field)
}

// decodeFile parses data into a File without validating it.
func decodeFile(data string) (*File, error) {
	// Every unescaped string field is a slice of data, so a lease costs no
	// allocation of its own.
	d := &decoder{s: data}
	f := new(File)
	sawVersion, sawLeases := false, false
	if d.peek() != '{' {
		return nil, errors.New("not a lease file: not a JSON object")
	}
	err := d.object(func(key string) error {
		switch fold(key, fileKeys...) {
		case "version":
			if d.null() {
				return nil
			}
			if c := d.peek(); c != '-' && (c < '0' || c > '9') {
				return d.errorf("\"version\" is not a number")
			}
			n, err := d.number()
			if err != nil {
				return err
			}
			sawVersion = true
			switch n {
			case "1":
				f.Version = 1
			case "2":
				f.Version = 2
			default:
				return fmt.Errorf("unsupported lease file version %s (this build reads versions %d to %d)", n, Version, MaxVersion)
			}
			return nil
		case "node":
			return d.strField(&f.Node, "node")
		case "subnet":
			return d.prefixField(&f.Subnet, "subnet")
		case "subnet6":
			return d.prefixField(&f.Subnet6, "subnet6")
		case "gateway6":
			return d.addrField(&f.Gateway6, "gateway6")
		case "lastReserved6":
			return d.addrField(&f.LastReserved6, "lastReserved6")
		case "gateway":
			return d.addrField(&f.Gateway, "gateway")
		case "lastReserved":
			return d.addrField(&f.LastReserved, "lastReserved")
		case "leases":
			// encoding/json merges a repeated array into the first one's
			// elements; no writer repeats a key, so refuse rather than
			// imitate that.
			if sawLeases {
				return d.errorf("\"leases\" appears twice")
			}
			sawLeases = true
			if d.null() {
				f.Leases = nil
				return nil
			}
			f.Leases = f.Leases[:0]
			if f.Leases == nil {
				// About 300 bytes a lease: one allocation for the slice.
				f.Leases = make([]Lease, 0, len(d.s)/300+1)
			}
			return d.array(func() error {
				f.Leases = append(f.Leases, Lease{})
				if d.null() {
					return nil
				}
				if err := d.lease(&f.Leases[len(f.Leases)-1]); err != nil {
					return fmt.Errorf("lease %d: %w", len(f.Leases)-1, err)
				}
				return nil
			})
		}
		return d.keep(&f.Unknown)
	})
	if err != nil {
		return nil, fmt.Errorf("parsing lease file: %w", err)
	}
	// Not peek() != 0: peek answers 0 for a NUL byte as for the end, and
	// a file with trailing NULs (a crash between extending and writing
	// it, on some filesystems) is not a lease file encoding/json accepts.
	if d.ws(); d.pos < len(d.s) {
		return nil, fmt.Errorf("parsing lease file: %w", d.errorf("data after the top-level object"))
	}
	if !sawVersion {
		return nil, errors.New("not a lease file: no \"version\" field")
	}
	return f, nil
}

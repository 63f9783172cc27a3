package leases

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// The lease file is read on every store operation and by every runtime
// lookup, so it has its own codec: encoding/json's reflection costs about
// 7 µs a lease, which on a 4,096-lease file is 28 ms a read. This decoder
// copies the input once into a string and slices every unescaped string
// field out of it, so a lease costs no allocation; rare escaped or non-ASCII
// strings fall back to encoding/json for exactly its semantics. Whatever it
// accepts, encoding/json decodes to the same File (FuzzCodecMatchesEncodingJSON
// checks it), but for the members neither knows: encoding/json drops them,
// this decoder keeps them verbatim (see UnknownMembers). It is stricter in
// two ways no writer meets: a repeated "leases" key, and unknown members
// nested over 64 levels deep.

type decoder struct {
	s   string
	pos int
	// key is where the key of the member being read starts, for keep.
	key int
	// kept is the UnknownMembers keep last added to, and d.s[keptFrom:
	// keptTo] its raw when that is a slice of d.s, so that the next member
	// of the same object extends the slice instead of concatenating.
	kept             *UnknownMembers
	keptFrom, keptTo int
}

func (d *decoder) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d: %s", d.pos, fmt.Sprintf(format, args...))
}

func (d *decoder) ws() {
	for d.pos < len(d.s) {
		switch d.s[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, or 0 at the end.
func (d *decoder) peek() byte {
	d.ws()
	if d.pos >= len(d.s) {
		return 0
	}
	return d.s[d.pos]
}

func (d *decoder) expect(c byte) error {
	if d.peek() != c {
		if d.pos >= len(d.s) {
			return d.errorf("unexpected end of input, want %q", c)
		}
		return d.errorf("want %q, got %q", c, d.s[d.pos])
	}
	d.pos++
	return nil
}

// plain marks the bytes a string can hold without unescaping: printable
// ASCII but the quote and the backslash.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str reads a JSON string. Lease file strings are short (a MAC, an IP, a
// name), so one pass with a table beats IndexByte plus a second check.
func (d *decoder) str() (string, error) {
	if err := d.expect('"'); err != nil {
		return "", err
	}
	start := d.pos
	i := start
	for i < len(d.s) && plain[d.s[i]] {
		i++
	}
	if i < len(d.s) && d.s[i] == '"' {
		d.pos = i + 1
		return d.s[start:i], nil
	}
	// Escapes, control or non-ASCII bytes: find the real end, skipping
	// escaped quotes, and let encoding/json apply its rules.
	for {
		if i >= len(d.s) {
			return "", d.errorf("unterminated string")
		}
		c := d.s[i]
		if c == '\\' {
			i += 2
			continue
		}
		if c == '"' {
			break
		}
		i++
	}
	var out string
	if err := json.Unmarshal([]byte(d.s[start-1:i+1]), &out); err != nil {
		return "", d.errorf("bad string: %v", err)
	}
	d.pos = i + 1
	return out, nil
}

// literal consumes null, true or false.
func (d *decoder) literal() (string, bool) {
	for _, lit := range [...]string{"null", "true", "false"} {
		if strings.HasPrefix(d.s[d.pos:], lit) {
			d.pos += len(lit)
			return lit, true
		}
	}
	return "", false
}

// null consumes a null if one is next: encoding/json leaves a field as it was
// when its value is null.
func (d *decoder) null() bool {
	if d.peek() == 'n' && strings.HasPrefix(d.s[d.pos:], "null") {
		d.pos += 4
		return true
	}
	return false
}

func (d *decoder) number() (string, error) {
	start := d.pos
	if d.pos < len(d.s) && d.s[d.pos] == '-' {
		d.pos++
	}
	digits := func() int {
		n := 0
		for d.pos < len(d.s) && d.s[d.pos] >= '0' && d.s[d.pos] <= '9' {
			d.pos++
			n++
		}
		return n
	}
	intStart := d.pos
	if n := digits(); n == 0 || (n > 1 && d.s[intStart] == '0') {
		return "", d.errorf("bad number")
	}
	if d.pos < len(d.s) && d.s[d.pos] == '.' {
		d.pos++
		if digits() == 0 {
			return "", d.errorf("bad number")
		}
	}
	if d.pos < len(d.s) && (d.s[d.pos] == 'e' || d.s[d.pos] == 'E') {
		d.pos++
		if d.pos < len(d.s) && (d.s[d.pos] == '+' || d.s[d.pos] == '-') {
			d.pos++
		}
		if digits() == 0 {
			return "", d.errorf("bad number")
		}
	}
	return d.s[start:d.pos], nil
}

// skip consumes any JSON value (that of a member this version does not
// know).
func (d *decoder) skip(depth int) error {
	if depth > 64 {
		return d.errorf("nesting too deep")
	}
	switch c := d.peek(); {
	case c == '"':
		_, err := d.str()
		return err
	case c == '{':
		return d.object(func(string) error { return d.skip(depth + 1) })
	case c == '[':
		return d.array(func() error { return d.skip(depth + 1) })
	case c == '-' || c >= '0' && c <= '9':
		_, err := d.number()
		return err
	default:
		if _, ok := d.literal(); !ok {
			return d.errorf("unexpected %q", c)
		}
		return nil
	}
}

// object walks an object, calling field for each key with the decoder
// positioned at the value.
func (d *decoder) object(field func(key string) error) error {
	if err := d.expect('{'); err != nil {
		return err
	}
	if d.peek() == '}' {
		d.pos++
		return nil
	}
	for {
		d.ws()
		d.key = d.pos
		key, err := d.str()
		if err != nil {
			return err
		}
		if err := d.expect(':'); err != nil {
			return err
		}
		if err := field(key); err != nil {
			return err
		}
		switch d.peek() {
		case ',':
			d.pos++
		case '}':
			d.pos++
			return nil
		default:
			return d.errorf("want ',' or '}' in object")
		}
	}
}

func (d *decoder) array(elem func() error) error {
	if err := d.expect('['); err != nil {
		return err
	}
	if d.peek() == ']' {
		d.pos++
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		switch d.peek() {
		case ',':
			d.pos++
		case ']':
			d.pos++
			return nil
		default:
			return d.errorf("want ',' or ']' in array")
		}
	}
}

// fold maps a key to the field name it matches the way encoding/json
// matches them: exactly or, failing that, case-insensitively. The exact
// match is the common case and costs one switch.
func fold(key string, names ...string) string {
	for _, n := range names {
		if key == n {
			return n
		}
	}
	for _, n := range names {
		if strings.EqualFold(key, n) {
			return n
		}
	}
	return key
}

var (
	fileKeys  = []string{"version", "node", "subnet", "gateway", "lastReserved", "subnet6", "gateway6", "lastReserved6", "leases"}
	leaseKeys = []string{"mac", "ip", "ip6", "state", "source", "containerID", "ifname", "netns", "bridgePort", "vm", "vmName", "home", "home6", "pod", "hostname", "created", "expires", "state6", "expires6"}
	podKeys   = []string{"namespace", "name", "uid"}
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
	return d.object(func(key string) error {
		switch fold(key, leaseKeys...) {
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
		return d.keep(&l.Unknown)
	})
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

package leases

import (
	"encoding/json"
	"fmt"
	"strings"
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
// (Eight bytes at a time with bit tricks measured no faster: most strings
// are keys shorter than a word.)
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
	return foldCase(key, names...)
}

// foldCase is the name key matches case-insensitively, or key itself.
func foldCase(key string, names ...string) string {
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

package leases

// UnknownMembers are the members of a JSON object in the lease file (the
// file itself, a lease, a pod) that this version of the package does not
// know: a newer writer's additions. They are kept verbatim, each from its
// key to the end of its value, and written back after the object's known
// members, in the order they were read. During a rolling upgrade an older
// CNI plugin and a newer vmlaned share one file; without this, every write
// by the older one would drop what the newer one added.
//
// Only a decode fills them, so they are always valid JSON; a lease a store
// creates has none. The zero value holds no member.
type UnknownMembers struct {
	// raw is the members joined by commas, `"k":v,"k2" : [1, 2]`.
	raw string
}

// IsZero reports whether there is no unknown member.
func (u UnknownMembers) IsZero() bool { return u.raw == "" }

// String returns the members as they are written: `"k":v` pairs joined by
// commas, without braces; "" when there is none.
func (u UnknownMembers) String() string { return u.raw }

// Equal reports whether u and v hold the same members, byte for byte. (It
// is also how go-cmp compares them.)
func (u UnknownMembers) Equal(v UnknownMembers) bool { return u.raw == v.raw }

// keep consumes the value of a member this version does not know and adds
// the member, from its key (d.key) to the end of its value, to dst. The
// members of one object usually stand together, separated by a bare comma
// (Encode puts them so): then dst grows as a longer slice of the input, and
// keeping them costs no allocation.
func (d *decoder) keep(dst *UnknownMembers) error {
	start := d.key
	if err := d.skip(0); err != nil {
		return err
	}
	m := d.s[start:d.pos]
	if dst.raw == "" {
		dst.raw = m
		d.kept, d.keptFrom, d.keptTo = dst, start, d.pos
		return nil
	}
	// dst.raw is the slice of d.s the last keep left, ending at the comma
	// before m: extend it. (A raw that was concatenated is not.)
	if d.kept == dst && d.keptTo == start-1 && d.s[start-1] == ',' && d.s[d.keptFrom:d.keptTo] == dst.raw {
		dst.raw = d.s[d.keptFrom:d.pos]
		d.keptTo = d.pos
		return nil
	}
	dst.raw = dst.raw + "," + m
	d.kept = nil
	return nil
}

// appendUnknown appends u's members to an object being encoded; first says
// whether they open it (no comma before them).
func appendUnknown(b []byte, first bool, u UnknownMembers) []byte {
	if u.raw == "" {
		return b
	}
	if !first {
		b = append(b, ',')
	}
	return append(b, u.raw...)
}

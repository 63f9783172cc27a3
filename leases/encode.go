package leases

import (
	"encoding/json"
	"net/netip"
	"time"
)

// The encoder appends the canonical form directly, without reflection: for
// the known members the same bytes encoding/json produces for File (the
// round-trip test and FuzzCodecMatchesEncodingJSON hold it to that), then
// each object's unknown members verbatim, in the order they were read.

// appendString appends s as a JSON string. Strings that need escaping (rare
// in a lease file) go through encoding/json, so escaping matches it exactly,
// HTML-safe escapes included.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func appendField(b []byte, first bool, name string) []byte {
	if !first {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, name...)
	return append(b, '"', ':')
}

func appendAddr(b []byte, a netip.Addr) []byte {
	b = append(b, '"')
	if a.IsValid() {
		b = a.AppendTo(b)
	}
	return append(b, '"')
}

func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

func appendLease(b []byte, l *Lease) []byte {
	b = append(b, '{')
	b = appendField(b, true, "mac")
	b = appendString(b, l.MAC)
	b = appendField(b, false, "ip")
	b = appendAddr(b, l.IP)
	if l.IP6.IsValid() {
		b = appendField(b, false, "ip6")
		b = appendAddr(b, l.IP6)
	}
	b = appendField(b, false, "state")
	b = appendString(b, string(l.State))
	b = appendField(b, false, "source")
	b = appendString(b, string(l.Source))
	for _, f := range [...]struct{ name, v string }{
		{"containerID", l.ContainerID}, {"ifname", l.IfName}, {"netns", l.NetNS}, {"bridgePort", l.BridgePort},
	} {
		if f.v != "" {
			b = appendField(b, false, f.name)
			b = appendString(b, f.v)
		}
	}
	if l.VM {
		b = appendField(b, false, "vm")
		b = append(b, "true"...)
	}
	if l.VMName != "" {
		b = appendField(b, false, "vmName")
		b = appendString(b, l.VMName)
	}
	for _, h := range [...]struct {
		name string
		p    netip.Prefix
	}{{"home", l.Home}, {"home6", l.Home6}} {
		if h.p.IsValid() {
			b = appendField(b, false, h.name)
			b = append(b, '"')
			b = h.p.AppendTo(b)
			b = append(b, '"')
		}
	}
	if l.Pod != (Pod{}) {
		b = appendField(b, false, "pod")
		b = append(b, '{')
		first := true
		for _, f := range [...]struct{ name, v string }{
			{"namespace", l.Pod.Namespace}, {"name", l.Pod.Name}, {"uid", l.Pod.UID},
		} {
			if f.v == "" {
				continue
			}
			b = appendField(b, first, f.name)
			b = appendString(b, f.v)
			first = false
		}
		b = appendUnknown(b, first, l.Pod.Unknown)
		b = append(b, '}')
	}
	if l.Hostname != "" {
		b = appendField(b, false, "hostname")
		b = appendString(b, l.Hostname)
	}
	if !l.Created.IsZero() {
		b = appendField(b, false, "created")
		b = appendTime(b, l.Created)
	}
	if !l.Expires.IsZero() {
		b = appendField(b, false, "expires")
		b = appendTime(b, l.Expires)
	}
	if l.State6 != "" {
		b = appendField(b, false, "state6")
		b = appendString(b, string(l.State6))
	}
	if !l.Expires6.IsZero() {
		b = appendField(b, false, "expires6")
		b = appendTime(b, l.Expires6)
	}
	b = appendUnknown(b, false, l.Unknown)
	return append(b, '}')
}

// Encode renders f in the file's canonical form: leases sorted by IP, one
// lease per line so that a diff of two versions is readable. The members a
// newer writer added and Decode kept ([UnknownMembers]) follow the known
// members of their object.
func (f *File) Encode() ([]byte, error) {
	f.sort()
	b := make([]byte, 0, 256+384*len(f.Leases))
	b = append(b, `{"version":`...)
	b = appendInt(b, max(f.Version, f.formatVersion()))
	if f.Node != "" {
		b = appendField(b, false, "node")
		b = appendString(b, f.Node)
	}
	b = appendField(b, false, "subnet")
	b = append(b, '"')
	if f.Subnet.IsValid() {
		b = f.Subnet.AppendTo(b)
	}
	b = append(b, '"')
	b = appendField(b, false, "gateway")
	b = appendAddr(b, f.Gateway)
	if f.LastReserved.IsValid() {
		b = appendField(b, false, "lastReserved")
		b = appendAddr(b, f.LastReserved)
	}
	if f.Subnet6.IsValid() {
		b = appendField(b, false, "subnet6")
		b = append(b, '"')
		b = f.Subnet6.AppendTo(b)
		b = append(b, '"')
	}
	for _, a := range [...]struct {
		name string
		v    netip.Addr
	}{{"gateway6", f.Gateway6}, {"lastReserved6", f.LastReserved6}} {
		if a.v.IsValid() {
			b = appendField(b, false, a.name)
			b = appendAddr(b, a.v)
		}
	}
	b = appendField(b, false, "leases")
	b = append(b, '[')
	for i := range f.Leases {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, "\n  "...)
		b = appendLease(b, &f.Leases[i])
	}
	if len(f.Leases) > 0 {
		b = append(b, '\n')
	}
	b = append(b, ']')
	b = appendUnknown(b, false, f.Unknown)
	return append(b, "}\n"...), nil
}

func appendInt(b []byte, n int) []byte {
	if n < 0 {
		b = append(b, '-')
		n = -n
	}
	var tmp [20]byte
	i := len(tmp)
	for {
		i--
		tmp[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	return append(b, tmp[i:]...)
}

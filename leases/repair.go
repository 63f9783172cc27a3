package leases

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// Salvaged is what [Salvage] recovered of a damaged lease file.
type Salvaged struct {
	// Leases are the leases whose lines are whole, each with the members
	// this version does not know (Lease.Unknown), as the decoder keeps
	// them.
	Leases []Lease
	// Header is the first line's: version (0 when the line is lost),
	// node, subnets, gateways, the allocation cursors and, for a file of
	// this version, its unknown top-level members.
	Header File
	// Lost describes each line that looks like a lease but does not
	// parse (a torn write): its address may be in use, and nothing
	// holds it.
	Lost []string
}

// Salvage returns what still parses of a damaged lease file: each line
// that holds one lease, as Encode writes them (one a line, a comma after
// all but the last), and what the first line says of the file when it
// parses. `vmlanectl leases repair` uses it beside what is live on the
// node.
func Salvage(data []byte) Salvaged {
	var out Salvaged
	for i, line := range bytes.Split(data, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if i == 0 {
			if head, ok := bytes.CutSuffix(line, []byte(`"leases":[`)); ok {
				out.Header = salvageHeader(string(head))
			}
			continue
		}
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("]}")), []byte(","))
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		f, err := decodeFile(`{"version":1,"leases":[` + string(line) + `]}`)
		ok := err == nil && len(f.Leases) == 1
		var l Lease
		if ok {
			l = f.Leases[0]
			ok = l.IP.IsValid() && l.State != "" && l.Source != ""
		}
		if ok && l.MAC == "" {
			// A declined address no client named (Tx.Decline).
			out.Leases = append(out.Leases, l)
			continue
		}
		if ok {
			var mac string
			if mac, err = NormalizeMAC(l.MAC); err == nil {
				l.MAC = mac
				out.Leases = append(out.Leases, l)
				continue
			}
		}
		const max = 120
		shown := string(line)
		if len(shown) > max {
			shown = shown[:max] + "..."
		}
		out.Lost = append(out.Lost, fmt.Sprintf("line %d: %q", i+1, shown))
	}
	return out
}

// salvageHeader reads the first line of a lease file up to its leases:
// with the decoder, keeping unknown members, when it is of this version;
// else its known members alone, to learn at least its version.
func salvageHeader(head string) File {
	if f, err := decodeFile(head + `"leases":[]}`); err == nil {
		f.Leases = nil
		return *f
	}
	var f File
	if json.Unmarshal([]byte(head+`"leases":[]}`), &f) != nil {
		return File{}
	}
	return File{Version: f.Version, Node: f.Node, Subnet: f.Subnet, Gateway: f.Gateway, Subnet6: f.Subnet6, Gateway6: f.Gateway6,
		LastReserved: f.LastReserved, LastReserved6: f.LastReserved6}
}

// ErrChanged is Replace's error when the file is no longer the one the
// caller read: a writer (an ADD, a DHCP bind) committed in between, and
// the caller must read and plan again.
var ErrChanged = errors.New("the lease file changed since it was read")

// Replace writes f as the store's whole file, under the store's lock,
// without decoding the file it replaces (which may be unreadable), but only
// while that file still holds the bytes was (nil: while there is none):
// else ErrChanged, and nothing is written, so that a change committed
// after the caller read the file is never overwritten. The old file, if
// any, is first linked as keep, in the same folder, so nothing is lost. f
// gets the store's subnet and gateway, and must validate: no address, MAC
// or attachment held twice, every address in the subnet.
func (s *Store) Replace(f *File, keep string, was []byte) error {
	lk, err := lockFile(s.lockPath)
	if err != nil {
		return err
	}
	defer lk.unlock()
	cur, err := os.ReadFile(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if was != nil {
			return fmt.Errorf("%w: %s is gone", ErrChanged, s.path)
		}
	case err != nil:
		return fmt.Errorf("reading %s: %w", s.path, err)
	case was == nil:
		return fmt.Errorf("%w: %s was written since", ErrChanged, s.path)
	case !bytes.Equal(cur, was):
		return fmt.Errorf("%w: %s was written since", ErrChanged, s.path)
	}
	f.Version, f.Subnet, f.Gateway = Version, s.subnet, s.gateway
	if s.subnet6.IsValid() {
		f.Subnet6, f.Gateway6 = s.subnet6, s.gateway6
	}
	if s.node != "" {
		f.Node = s.node
	}
	if f.Leases == nil {
		f.Leases = []Lease{}
	}
	f.sort()
	if err := f.validate(); err != nil {
		return fmt.Errorf("the rebuilt lease file is not valid: %w", err)
	}
	if keep != "" {
		if err := os.Link(s.path, keep); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("keeping %s as %s: %w", s.path, keep, err)
		}
	}
	return s.writeLocked(f)
}

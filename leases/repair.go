package leases

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// Salvage returns what still parses of a damaged lease file: each line
// that holds one lease, as Encode writes them (one a line, a comma after
// all but the last), and the subnet and gateway of its first line when
// that parses. `vmlanectl leases repair` uses it beside what is live on
// the node. Members this version does not know are not kept.
func Salvage(data []byte) (ls []Lease, header File) {
	for i, line := range bytes.Split(data, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if i == 0 {
			if head, ok := bytes.CutSuffix(line, []byte(`"leases":[`)); ok {
				var f File
				if json.Unmarshal(append(bytes.Clone(head), `"leases":[]}`...), &f) == nil {
					header = File{Version: f.Version, Node: f.Node, Subnet: f.Subnet, Gateway: f.Gateway, Subnet6: f.Subnet6, Gateway6: f.Gateway6}
				}
			}
			continue
		}
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("]}")), []byte(","))
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var l Lease
		if json.Unmarshal(line, &l) != nil || !l.IP.IsValid() || l.State == "" || l.Source == "" {
			continue
		}
		if mac, err := NormalizeMAC(l.MAC); err == nil {
			l.MAC = mac
			ls = append(ls, l)
		}
	}
	return ls, header
}

// Replace writes f as the store's whole file, under the store's lock,
// without reading the file it replaces (which may be unreadable). That
// file, if any, is first linked as keep, in the same folder, so nothing is
// lost. f gets the store's subnet and gateway, and must validate: no
// duplicate address or MAC, every address in the subnet.
func (s *Store) Replace(f *File, keep string) error {
	lk, err := lockFile(s.lockPath)
	if err != nil {
		return err
	}
	defer lk.unlock()
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

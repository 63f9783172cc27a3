package pf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"

	"github.com/vmlane/vmlane/internal/atomicfile"
)

// DefaultVmnetStatePath is where vmlaned records what it changed in
// vmnet's configuration, so that `vmlanectl teardown` can undo it.
const DefaultVmnetStatePath = "/var/db/vmlane/vmnet.json"

// vmnetState is the vmnet state file.
type vmnetState struct {
	Version int `json:"version"`
	// Plist is the vmnet plist vmlaned edited.
	Plist string `json:"plist,omitempty"`
	// Previous are the plist's Shared_Net_* values before vmlaned first
	// changed them (empty fields: the keys were absent); Set the values
	// it wrote last.
	Previous *SharedNet `json:"previous,omitempty"`
	Set      *SharedNet `json:"set,omitempty"`
	// NetworkFile is the network description vmlaned wrote.
	NetworkFile string `json:"networkFile,omitempty"`
	// BootpdPlist is the bootpd plist vmlaned set
	// dhcp_ignore_client_identifier in, BootpdPrevious the key before.
	BootpdPlist    string    `json:"bootpdPlist,omitempty"`
	BootpdPrevious *Previous `json:"bootpdPrevious,omitempty"`
}

func saveVmnetState(path string, st vmnetState) error {
	st.Version = 1
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFileAll(path, append(data, '\n'), 0o600)
}

// readOptional reads a file that may not exist yet, and its mode (def
// when it does not exist).
func readOptional(path string, def os.FileMode) ([]byte, os.FileMode, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, def, nil
	}
	if err != nil {
		return nil, 0, err
	}
	mode := def
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	return data, mode, nil
}

// ApplyPlist makes the vmnet plist at path put the shared network on
// subnet (EditPlist), writing it atomically in its own format and mode,
// and only when a value differs. Before it first changes the file it
// records the old values in the state file at statePath, and it saves the
// state before the plist, so a crash in between still leaves teardown
// knowing what to restore. It reports whether it wrote the plist; vmnet
// reads it when the shared network next starts.
func ApplyPlist(path, statePath string, subnet netip.Prefix) (bool, error) {
	want, err := SharedNetFor(subnet)
	if err != nil {
		return false, err
	}
	data, mode, err := readOptional(path, 0o644)
	if err != nil {
		return false, err
	}
	out, changed, err := EditPlist(data, want)
	if err != nil {
		return false, fmt.Errorf("vmnet plist %s: %w", path, err)
	}
	if !changed {
		return false, nil
	}
	st, err := readState[vmnetState](statePath, "vmnet")
	if err != nil {
		return false, err
	}
	if st.Previous == nil || st.Plist != path {
		prev, err := ReadSharedNet(data)
		if err != nil {
			return false, err
		}
		st.Plist, st.Previous = path, &prev
	}
	st.Set = &want
	if err := saveVmnetState(statePath, st); err != nil {
		return false, fmt.Errorf("saving vmnet state: %w", err)
	}
	if err := atomicfile.WriteFileAll(path, out, mode); err != nil {
		return false, fmt.Errorf("writing vmnet plist %s: %w", path, err)
	}
	return true, nil
}

// WriteNetworkFile writes the network description n to path, atomically
// and only when its content changes (a runtime watching the file sees a
// change only when there is one), and records path in the state file so
// teardown removes it. It reports whether it wrote.
func WriteNetworkFile(path, statePath string, n Network) (bool, error) {
	data, err := n.Marshal()
	if err != nil {
		return false, err
	}
	st, err := readState[vmnetState](statePath, "vmnet")
	if err != nil {
		return false, err
	}
	if st.NetworkFile != path {
		st.NetworkFile = path
		if err := saveVmnetState(statePath, st); err != nil {
			return false, fmt.Errorf("saving vmnet state: %w", err)
		}
	}
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	// World-readable: VM runtimes run as their users, not as root.
	if err := atomicfile.WriteFileAll(path, data, 0o644); err != nil {
		return false, fmt.Errorf("writing vmnet network file %s: %w", path, err)
	}
	return true, nil
}

// RestoreVmnet undoes what the state file at statePath records: the vmnet
// plist gets back the Shared_Net_* values it had before vmlane (keys that
// were absent are removed again), unless someone has changed them since
// vmlane wrote them, in which case the file is left alone and the line
// says so; bootpd's plist gets back its dhcp_ignore_client_identifier on
// the same terms; the network description is removed; then the state
// file. It
// returns one line per thing it did or left.
func RestoreVmnet(statePath string) ([]string, error) {
	st, err := readState[vmnetState](statePath, "vmnet")
	if err != nil {
		return nil, err
	}
	var done []string
	var errs []error
	if st.Plist != "" && st.Previous != nil && st.Set != nil {
		line, err := restorePlist(st.Plist, *st.Previous, *st.Set)
		if err != nil {
			errs = append(errs, err)
		} else {
			done = append(done, line)
		}
	}
	if st.BootpdPlist != "" && st.BootpdPrevious != nil {
		line, err := restoreBootpd(st.BootpdPlist, *st.BootpdPrevious)
		if err != nil {
			errs = append(errs, err)
		} else {
			done = append(done, line)
		}
	}
	if st.NetworkFile != "" {
		switch err := os.Remove(st.NetworkFile); {
		case err == nil:
			done = append(done, "removed "+st.NetworkFile)
		case !errors.Is(err, fs.ErrNotExist):
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		if err := os.Remove(statePath); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return done, errors.Join(errs...)
}

func restorePlist(path string, prev, set SharedNet) (string, error) {
	data, mode, err := readOptional(path, 0o644)
	if err != nil {
		return "", err
	}
	cur, err := ReadSharedNet(data)
	if err != nil {
		return "", fmt.Errorf("vmnet plist %s: %w", path, err)
	}
	if cur != set {
		return fmt.Sprintf("left %s as it is: its %s/%s are %s/%s, %v (vmlane wrote %s/%s)",
			path, KeyAddress, KeyMask, orAbsent(cur.Address), orAbsent(cur.Mask), errNotOurs, set.Address, set.Mask), nil
	}
	out, changed, err := EditPlist(data, prev)
	if err != nil {
		return "", fmt.Errorf("vmnet plist %s: %w", path, err)
	}
	if changed {
		if err := atomicfile.WriteFileAll(path, out, mode); err != nil {
			return "", fmt.Errorf("writing vmnet plist %s: %w", path, err)
		}
	}
	return fmt.Sprintf("restored %s in %s to %s/%s (vmnet uses them when its shared network next starts)",
		KeyAddress+"/"+KeyMask, path, orAbsent(prev.Address), orAbsent(prev.Mask)), nil
}

func orAbsent(s string) string {
	if s == "" {
		return "(absent)"
	}
	return s
}

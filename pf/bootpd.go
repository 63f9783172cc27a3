package pf

import (
	"fmt"

	"howett.net/plist"

	"github.com/vmlane/vmlane/internal/atomicfile"
)

// DefaultBootpdPlist is the configuration of bootpd, the DHCP server of
// vmnet's shared network. InternetSharing writes it when it starts the
// shared network, and bootpd reads it when it starts and on SIGHUP
// (bootp's bootpd.tproj/bootpd.8).
const DefaultBootpdPlist = "/etc/bootpd.plist"

// KeyIgnoreClientID makes bootpd key its leases on the hardware address
// (bp_chaddr) rather than on the client identifier (option 61) a guest
// sends: bootpd.8 documents it, and bootpd.tproj/dhcpd.c (dhcp_request)
// then uses chaddr whenever the packet has one. Since macOS 15 bootpd
// writes a client identifier into the lease file's hw_address, so without
// this key a Linux guest that sends an RFC 4361 identifier (a DUID) cannot
// be found by its MAC.
const KeyIgnoreClientID = "dhcp_ignore_client_identifier"

// Previous is a plist key's value before vmlane changed it: Absent, or
// Value (bootpd reads a boolean or a number; a number reads as a
// boolean, nonzero being true, and is restored as one).
type Previous struct {
	Absent bool `json:"absent,omitempty"`
	Value  bool `json:"value,omitempty"`
}

// ReadIgnoreClientID returns the key's value in a bootpd plist as bootpd
// reads it (my_CFTypeToNumber: a boolean, or a number nonzero for true),
// and whether the key is there. Another type is there and false, as bootpd
// logs it invalid and keeps the default.
func ReadIgnoreClientID(data []byte) (value, present bool, err error) {
	dict, _, err := decodePlist(data)
	if err != nil {
		return false, false, err
	}
	value, present = ignoreClientID(dict)
	return value, present, nil
}

func ignoreClientID(dict map[string]any) (value, present bool) {
	v, ok := dict[KeyIgnoreClientID]
	if !ok {
		return false, false
	}
	switch v := v.(type) {
	case bool:
		return v, true
	case uint64:
		return v != 0, true
	case int64:
		return v != 0, true
	case float64:
		return v != 0, true
	}
	return false, true
}

// EditBootpdPlist returns data with dhcp_ignore_client_identifier set to
// want (Absent deletes it), in data's format, every other key kept. When
// the key already says so (a number counts as its boolean) it returns data
// itself and false. Pure: golden tested.
func EditBootpdPlist(data []byte, want Previous) ([]byte, bool, error) {
	dict, format, err := decodePlist(data)
	if err != nil {
		return nil, false, err
	}
	if bootpdSays(dict, want) {
		return data, false, nil
	}
	if want.Absent {
		delete(dict, KeyIgnoreClientID)
	} else {
		dict[KeyIgnoreClientID] = want.Value
	}
	out, err := encodePlist(dict, format, func(back map[string]any) bool { return bootpdSays(back, want) })
	if err != nil {
		return nil, false, err
	}
	return out, true, nil
}

// bootpdSays reports whether a bootpd plist's dict says what want does
// about dhcp_ignore_client_identifier: absent, or present with its value.
func bootpdSays(dict map[string]any, want Previous) bool {
	v, present := ignoreClientID(dict)
	return present != want.Absent && (want.Absent || v == want.Value)
}

// encodePlist writes dict in format: XML indented with tabs, as macOS
// writes its own XML plists. A plist of another format that its encoder
// cannot write, or writes so that it does not read back or reads back
// without what vmlane set (reads says whether a decoded dict has it), is
// written as XML instead, which vmnet and bootpd read as well:
// howett.net/plist v1.0.1's text (OpenStep) encoder leaves some keys
// unquoted that its parser refuses (a key of nineteen digits), panics on a
// character beyond U+FFFF (it pads its \U escapes to four digits), and
// OpenStep has no booleans (bootpd's key read back as the string "1").
// FuzzEditPlist and FuzzEditBootpdPlist found them.
func encodePlist(dict map[string]any, format int, reads func(map[string]any) bool) ([]byte, error) {
	if format != plist.XMLFormat {
		if out, err := marshalOther(dict, format); err == nil {
			if back, _, err := decodePlist(out); err == nil && reads(back) {
				return out, nil
			}
		}
		format = plist.XMLFormat
	}
	out, err := plist.MarshalIndent(dict, format, "\t")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// marshalOther is plist.Marshal, with the encoder's panics as errors.
func marshalOther(dict map[string]any, format int) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("plist encoder: %v", r)
		}
	}()
	return plist.Marshal(dict, format)
}

// ApplyBootpdPlist sets dhcp_ignore_client_identifier to true in the
// bootpd plist at path, atomically, in its own format and mode, and only
// when it says otherwise. It reports whether it wrote; bootpd reads the
// change on SIGHUP. Before it first changes the file it records the key's
// previous value in the state file at statePath, which RestoreVmnet puts
// back; a plist that InternetSharing wrote again since (without the key)
// does not count as a new previous value. No plist yet (InternetSharing
// has not started the shared network) is nothing to do.
func ApplyBootpdPlist(path, statePath string) (bool, error) {
	data, mode, err := readOptional(path, 0o644)
	if err != nil || data == nil {
		return false, err
	}
	out, changed, err := EditBootpdPlist(data, Previous{Value: true})
	if err != nil {
		return false, fmt.Errorf("bootpd plist %s: %w", path, err)
	}
	if !changed {
		return false, nil
	}
	st, err := readState[vmnetState](statePath, "vmnet")
	if err != nil {
		return false, err
	}
	if st.BootpdPlist != path || st.BootpdPrevious == nil {
		v, present, _ := ReadIgnoreClientID(data)
		st.BootpdPlist, st.BootpdPrevious = path, &Previous{Absent: !present, Value: v}
		if err := saveVmnetState(statePath, st); err != nil {
			return false, fmt.Errorf("saving vmnet state: %w", err)
		}
	}
	if err := atomicfile.WriteFileAll(path, out, mode); err != nil {
		return false, fmt.Errorf("writing bootpd plist %s: %w", path, err)
	}
	return true, nil
}

// restoreBootpd puts the key's previous value back, unless the key no
// longer says true (InternetSharing or someone else wrote the file since,
// and what it says is theirs).
func restoreBootpd(path string, prev Previous) (string, error) {
	data, mode, err := readOptional(path, 0o644)
	if err != nil {
		return "", err
	}
	if data == nil {
		return fmt.Sprintf("left %s alone: it is gone", path), nil
	}
	v, _, err := ReadIgnoreClientID(data)
	if err != nil {
		return "", fmt.Errorf("bootpd plist %s: %w", path, err)
	}
	if !v {
		return fmt.Sprintf("left %s as it is: its %s is no longer true, %v", path, KeyIgnoreClientID, errNotOurs), nil
	}
	out, changed, err := EditBootpdPlist(data, prev)
	if err != nil {
		return "", fmt.Errorf("bootpd plist %s: %w", path, err)
	}
	if changed {
		if err := atomicfile.WriteFileAll(path, out, mode); err != nil {
			return "", fmt.Errorf("writing bootpd plist %s: %w", path, err)
		}
	}
	was := "absent"
	if !prev.Absent {
		was = fmt.Sprint(prev.Value)
	}
	return fmt.Sprintf("restored %s in %s to %s (bootpd reads it when it next starts or gets SIGHUP)", KeyIgnoreClientID, path, was), nil
}

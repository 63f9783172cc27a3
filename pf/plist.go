package pf

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"

	"howett.net/plist"
)

// DefaultVmnetPlist is vmnet's preferences file, read by vmnet (up to
// macOS 15) when its shared network starts.
const DefaultVmnetPlist = "/Library/Preferences/SystemConfiguration/com.apple.vmnet.plist"

// The vmnet plist keys vmlane sets; every other key stays as it is.
const (
	KeyAddress = "Shared_Net_Address"
	KeyMask    = "Shared_Net_Mask"
)

// SharedNet is the pair of vmnet plist values vmlane sets. An empty field
// stands for an absent key.
type SharedNet struct {
	Address string `json:"Shared_Net_Address,omitempty"`
	Mask    string `json:"Shared_Net_Mask,omitempty"`
}

// SharedNetFor is what vmnet's plist must say for the VMs to get addresses
// in subnet: the gateway address (the subnet's first host, which the Mac
// takes on vmnet's bridge; vmnet refuses the network address) and the
// mask. vmnet's DHCP server (bootpd) then hands out the rest of the subnet.
func SharedNetFor(subnet netip.Prefix) (SharedNet, error) {
	if !subnet.Addr().Is4() || subnet != subnet.Masked() || subnet.Bits() > 30 || subnet.Bits() < 8 {
		return SharedNet{}, fmt.Errorf("vmnet subnet %s: want an IPv4 network from /8 to /30", subnet)
	}
	m := ^uint32(0) << (32 - subnet.Bits())
	mask := netip.AddrFrom4([4]byte{byte(m >> 24), byte(m >> 16), byte(m >> 8), byte(m)})
	return SharedNet{Address: subnet.Addr().Next().String(), Mask: mask.String()}, nil
}

// decodePlist reads a plist of any format (XML, binary, OpenStep,
// GNUstep) whose root is a dictionary. Empty input is an empty XML plist:
// vmnet's file does not exist before vmnet's first start.
func decodePlist(data []byte) (map[string]any, int, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return map[string]any{}, plist.XMLFormat, nil
	}
	var root any
	format, err := plist.Unmarshal(data, &root)
	if err != nil {
		return nil, 0, err
	}
	dict, ok := root.(map[string]any)
	if !ok {
		return nil, 0, fmt.Errorf("plist root is a %T, not a dictionary", root)
	}
	return dict, format, nil
}

// ReadSharedNet returns the Shared_Net_* values of a vmnet plist; keys
// that are absent, or not strings, read as "".
func ReadSharedNet(data []byte) (SharedNet, error) {
	dict, _, err := decodePlist(data)
	if err != nil {
		return SharedNet{}, err
	}
	return sharedNetOf(dict), nil
}

func sharedNetOf(dict map[string]any) SharedNet {
	a, _ := dict[KeyAddress].(string)
	m, _ := dict[KeyMask].(string)
	return SharedNet{Address: a, Mask: m}
}

// EditPlist returns data with Shared_Net_Address and Shared_Net_Mask set to
// want's values (an empty value deletes the key, which restoring an
// originally absent key needs), in the format data has, every other key
// kept: per-interface entries, Host_Net_* keys, and keys vmlane has never
// heard of keep their values and types. When the values already match it
// returns data itself and false, so an unchanged file is never rewritten
// (vmnet and anyone diffing the file see no churn). Pure: golden tested.
func EditPlist(data []byte, want SharedNet) ([]byte, bool, error) {
	dict, format, err := decodePlist(data)
	if err != nil {
		return nil, false, err
	}
	if sharedNetIs(dict, want) {
		return data, false, nil
	}
	for k, v := range map[string]string{KeyAddress: want.Address, KeyMask: want.Mask} {
		if v == "" {
			delete(dict, k)
		} else {
			dict[k] = v
		}
	}
	out, err := encodePlist(dict, format, func(back map[string]any) bool { return sharedNetIs(back, want) })
	if err != nil {
		return nil, false, err
	}
	return out, true, nil
}

// sharedNetIs reports whether dict holds exactly want's values: the keys
// of its empty fields absent, the others present (sharedNetOf reads a
// non-string as "", so a present key holds its value's string).
func sharedNetIs(dict map[string]any, want SharedNet) bool {
	if sharedNetOf(dict) != want {
		return false
	}
	for k, v := range map[string]string{KeyAddress: want.Address, KeyMask: want.Mask} {
		if _, present := dict[k]; present != (v != "") {
			return false
		}
	}
	return true
}

// errNotOurs says the plist holds values vmlane did not write.
var errNotOurs = errors.New("changed since vmlane wrote it")

package plugin

// The names a network config gives a VM attachment's devices: its TAP's
// name, owner and group, its pod interface's MAC, and the bridge's
// anti-spoofing table.

import (
	"encoding/json"
	"math"
	"os/user"
	"strconv"
	"strings"

	"github.com/vmlane/vmlane/internal/antispoof"
)

// Values of podMAC.
const (
	PodMACRandom = "random"
	PodMACGuest  = "guest"
)

// AntiSpoofTable names the anti-spoofing table of bridge's ports (see
// package antispoof): TableName for the default bridge, whose table had
// that name before a node could have more than one vmlane network, and
// TableName-BRIDGE for another.
func AntiSpoofTable(bridge string) string {
	if bridge == DefaultBridge {
		return antispoof.TableName
	}
	return antispoof.TableName + "-" + bridge
}

// TapFor is the name of the TAP of the VM attachment whose pod interface
// is ifName: the config's tapName, else "tap" and what follows ifName's
// first three bytes, as KubeVirt names the TAP of a pod interface (eth0
// gives tap0, Multus's net1 and net2 give tap1 and tap2). A name that
// would be ifName itself, or that has nothing after "tap", is "tap-" and
// ifName, cut to 15 bytes.
func (c *Config) TapFor(ifName string) string {
	if c.TapName != "" {
		return c.TapName
	}
	if len(ifName) > 3 && !strings.HasPrefix(ifName, "tap") {
		return "tap" + ifName[3:]
	}
	return ("tap-" + ifName)[:min(15, 4+len(ifName))]
}

// parseID reads tapOwner or tapGroup: absent or null is 0 (root); a
// number, or a string of digits, is taken as it is (the runtime's user
// may exist only inside its container); another string is a name that
// lookup must find on the node.
func parseID(field string, raw json.RawMessage, lookup func(string) (string, error)) (uint32, error) {
	what := "user"
	if field == "tapGroup" {
		what = "group"
	}
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, configError(field, string(raw), "not a number or a name")
	}
	var s string
	switch v := v.(type) {
	case float64:
		s = strconv.FormatFloat(v, 'f', -1, 64)
	case string:
		s = v
	default:
		return 0, configError(field, string(raw), "not a number or a name")
	}
	id, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		if _, ok := v.(float64); ok || s == "" || s[0] >= '0' && s[0] <= '9' {
			return 0, configError(field, s, "not an id from 0 to 4294967294")
		}
		n, lerr := lookup(s)
		if lerr != nil {
			return 0, configError(field, s, "not a number, and the node has no such "+what+" ("+lerr.Error()+")")
		}
		id, err = strconv.ParseUint(n, 10, 32)
		if err != nil {
			return 0, configError(field, s, "the node gives it id "+n)
		}
	}
	if id == math.MaxUint32 {
		return 0, configError(field, s, "not an id from 0 to 4294967294 (-1 means none, which TUNSETOWNER refuses)")
	}
	return uint32(id), nil
}

func lookupUser(name string) (string, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return "", err
	}
	return u.Uid, nil
}

func lookupGroup(name string) (string, error) {
	g, err := user.LookupGroup(name)
	if err != nil {
		return "", err
	}
	return g.Gid, nil
}

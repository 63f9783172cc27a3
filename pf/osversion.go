package pf

import (
	"fmt"
	"strconv"
	"strings"
)

// VmnetMode is how vmlaned tells vmnet the node's subnet.
type VmnetMode int

const (
	// ModePlist: vmnet reads Shared_Net_Address and Shared_Net_Mask from
	// its plist when the shared network starts (macOS up to 15).
	ModePlist VmnetMode = iota + 1
	// ModeNetworkAPI: vmnet ignores those keys; vmlane-vmnet creates the
	// network with the vmnet_network API from the JSON description
	// vmlaned writes, and hands it to VM runtimes (macOS 26 and later).
	ModeNetworkAPI
)

// String names the mode as vmlaned logs it.
func (m VmnetMode) String() string {
	switch m {
	case ModePlist:
		return "plist"
	case ModeNetworkAPI:
		return "network-api"
	}
	return fmt.Sprintf("VmnetMode(%d)", int(m))
}

// ParseProductVersion reads macOS's product version ("15.6.1", "26.0").
func ParseProductVersion(s string) (major, minor int, err error) {
	parts := strings.Split(strings.TrimSpace(s), ".")
	if len(parts) < 1 || len(parts) > 3 {
		return 0, 0, fmt.Errorf("macOS version %q: want MAJOR[.MINOR[.PATCH]]", s)
	}
	nums := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return 0, 0, fmt.Errorf("macOS version %q: want MAJOR[.MINOR[.PATCH]]", s)
		}
		nums[i] = n
	}
	if len(nums) > 1 {
		minor = nums[1]
	}
	return nums[0], minor, nil
}

// ModeFor picks how vmnet is told the subnet on the macOS version given
// (kern.osproductversion). Versions after 15 use the network API: macOS
// went from 15 to 26, and 16.0 is what macOS 26 reports to programs built
// with an older SDK (as Big Sur reported 10.16), so 16 means 26 as well.
// Versions before 11 are refused: vmnet's shared mode as vmlane uses it
// needs Big Sur's Virtualization.framework.
func ModeFor(productVersion string) (VmnetMode, error) {
	major, minor, err := ParseProductVersion(productVersion)
	if err != nil {
		return 0, err
	}
	switch {
	case major == 10 && minor == 16: // Big Sur, to an old SDK
		return ModePlist, nil
	case major < 11:
		return 0, fmt.Errorf("macOS %s is too old: vmlane needs macOS 11 or later", productVersion)
	case major <= 15:
		return ModePlist, nil
	default:
		return ModeNetworkAPI, nil
	}
}

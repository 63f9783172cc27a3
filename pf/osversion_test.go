package pf

import (
	"fmt"
	"strings"
	"testing"
)

// TestVmnetModeGolden is the OS-version switch: which versions write the
// plist and which the network description.
func TestVmnetModeGolden(t *testing.T) {
	var b strings.Builder
	for _, v := range []string{"10.15.7", "10.16", "11.7.10", "12.7", "13.6.9", "14.7.1", "15.0", "15.6.1", "16.0", "26.0", "26.0.1", "26.1", "27.0", "", "15.x", "26.0.1.2", "-1"} {
		m, err := ModeFor(v)
		if err != nil {
			fmt.Fprintf(&b, "%-11q error: %v\n", v, err)
			continue
		}
		what := map[VmnetMode]string{
			ModePlist:      "write Shared_Net_Address/Shared_Net_Mask in " + DefaultVmnetPlist,
			ModeNetworkAPI: "write the vmnet_network description to --vmnet-network-file",
		}[m]
		fmt.Fprintf(&b, "%-11q %-11s %s\n", v, m, what)
	}
	golden(t, "osversion.golden", []byte(b.String()))
}

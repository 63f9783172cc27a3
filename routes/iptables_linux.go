package routes

import (
	"bytes"
	"fmt"
	"os/exec"

	"github.com/coreos/go-iptables/iptables"
)

// goIPTables adapts go-iptables (which has every method but List and
// Restore in the shape vmlane's interface wants) to iptablesInterface.
type goIPTables struct{ *iptables.IPTables }

// NewIPTables returns iptables for IPv4 (v6 false) or IPv6, with -w so
// vmlane waits for the xtables lock instead of failing.
func NewIPTables(v6 bool) (iptablesInterface, error) {
	proto := iptables.ProtocolIPv4
	if v6 {
		proto = iptables.ProtocolIPv6
	}
	ipt, err := iptables.New(iptables.IPFamily(proto), iptables.Timeout(5))
	if err != nil {
		return nil, err
	}
	return goIPTables{ipt}, nil
}

// Restore runs iptables-restore --noflush (ip6tables-restore for IPv6),
// the same backend as the iptables command the rest goes through (the
// image's alternatives point both at it), waiting up to 5 s for the
// xtables lock as the other calls do.
func (g goIPTables) Restore(data []byte) error {
	cmd := "iptables-restore"
	if g.Proto() == iptables.ProtocolIPv6 {
		cmd = "ip6tables-restore"
	}
	c := exec.Command(cmd, "--noflush", "-w", "5")
	c.Stdin = bytes.NewReader(data)
	if out, err := c.CombinedOutput(); err != nil {
		return fmt.Errorf("%s --noflush: %w: %s", cmd, err, bytes.TrimSpace(out))
	}
	return nil
}

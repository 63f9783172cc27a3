package routes

import (
	"os/exec"

	"github.com/coreos/go-iptables/iptables"

	"github.com/vmlane/vmlane/internal/command"
)

// goIPTables adapts go-iptables (which has every method but List and
// Restore in the shape vmlane's interface wants) to iptablesInterface.
type goIPTables struct {
	*iptables.IPTables
	restore string // iptables-restore or ip6tables-restore
	run     command.Runner
}

// NewIPTables returns iptables for IPv4 (v6 false) or IPv6, with -w so
// vmlane waits for the xtables lock instead of failing. It finds
// iptables-restore (ip6tables-restore) on PATH once, as go-iptables finds
// iptables, and runs that program from then on.
func NewIPTables(v6 bool) (iptablesInterface, error) {
	proto, restore := iptables.ProtocolIPv4, "iptables-restore"
	if v6 {
		proto, restore = iptables.ProtocolIPv6, "ip6tables-restore"
	}
	ipt, err := iptables.New(iptables.IPFamily(proto), iptables.Timeout(5))
	if err != nil {
		return nil, err
	}
	path, err := exec.LookPath(restore)
	if err != nil {
		return nil, err
	}
	return goIPTables{ipt, restore, command.Exec{Tools: map[string]string{restore: path}}}, nil
}

// Restore runs iptables-restore --noflush (ip6tables-restore for IPv6),
// the same backend as the iptables command the rest goes through (the
// image's alternatives point both at it), waiting up to 5 s for the
// xtables lock as the other calls do.
func (g goIPTables) Restore(data []byte) error {
	_, err := g.run.Run(string(data), g.restore, "--noflush", "-w", "5")
	return err
}

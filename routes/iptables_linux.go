package routes

import (
	"github.com/coreos/go-iptables/iptables"
)

// goIPTables adapts go-iptables (which has every method but List in the
// shape vmlane's interface wants) to iptablesInterface.
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

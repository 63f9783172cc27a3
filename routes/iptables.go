package routes

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// vmlane's own chains. Everything vmlane does in iptables is in these,
// reached by one jump rule each from the built-in chain.
const (
	ChainNAT     = "VMLANE-POSTROUTING"
	ChainForward = "VMLANE-FORWARD"
)

// IPTables is the part of github.com/coreos/go-iptables vmlane uses, one
// per address family.
type IPTables = iptablesInterface

// iptablesInterface is the part of github.com/coreos/go-iptables vmlane
// uses, one per address family.
type iptablesInterface interface {
	ChainExists(table, chain string) (bool, error)
	NewChain(table, chain string) error
	ClearChain(table, chain string) error
	DeleteChain(table, chain string) error
	Exists(table, chain string, rulespec ...string) (bool, error)
	Insert(table, chain string, pos int, rulespec ...string) error
	Append(table, chain string, rulespec ...string) error
	Delete(table, chain string, rulespec ...string) error
	// List returns the chain as `iptables -S` prints it: the -N line
	// (for user chains), then one -A line per rule.
	List(table, chain string) ([]string, error)
	// Restore feeds data to `iptables-restore --noflush` (or
	// ip6tables-restore): one exec, one commit per table, chains it does
	// not name left alone.
	Restore(data []byte) error
}

// Chain is a rule set vmlane owns, and the jump that reaches it.
type Chain struct {
	Table, Name string
	// From is the built-in chain that jumps here, with JumpComment.
	From        string
	JumpComment string
	Rules       [][]string
}

// NATOptions says which traffic of one address family to masquerade.
type NATOptions struct {
	// PodCIDR is this node's pod subnet of the family; zero on a
	// routes-only node, whose pod subnet is its own CNI's.
	PodCIDR netip.Prefix
	// Cluster is the pod network: --cluster-cidr, or every node's
	// podCIDRs of the family.
	Cluster []netip.Prefix
	// Masquerade turns on NAT for pod traffic leaving the pod network.
	Masquerade bool
	// Services are the family's Service CIDRs. With RouteServices this
	// node routes them to a Service gateway, and its pods' traffic to
	// them leaves un-NATed (the gateway masquerades it); otherwise the
	// traffic of ServiceClients (other nodes' pod subnets) to them, as
	// kube-proxy has DNATed it here, is masqueraded, so that the
	// backend's replies come back through this node to be un-DNATed.
	Services       []netip.Prefix
	RouteServices  bool
	ServiceClients []netip.Prefix
}

// family is the index of o's address family (see familyIndex).
func (o NATOptions) family() int {
	if o.PodCIDR.IsValid() {
		return familyIndex(o.PodCIDR)
	}
	// Not append(o.Services, o.ServiceClients...): that could write
	// into the spare capacity of the caller's Services.
	if len(o.Services) > 0 {
		return familyIndex(o.Services[0])
	}
	if len(o.ServiceClients) > 0 {
		return familyIndex(o.ServiceClients[0])
	}
	return 0
}

// skeletons are vmlane's two chains without rules: their names and
// jumps, which do not depend on the options.
func skeletons() (nat, fwd Chain) {
	return Chain{Table: "nat", Name: ChainNAT, From: "POSTROUTING", JumpComment: "vmlane: pod subnet NAT rules"},
		Chain{Table: "filter", Name: ChainForward, From: "FORWARD", JumpComment: "vmlane: pod subnet forwarding"}
}

func comment(s string) []string { return []string{"-m", "comment", "--comment", "vmlane: " + s} }

// Chains renders vmlane's chains for one address family: pod-to-pod
// traffic keeps its source address (so the receiver sees the sender's pod
// IP), pod traffic to anywhere else is masqueraded, and forwarding to and
// from the pod subnet is accepted. A Service gateway masquerades its
// clients' Service traffic. A node without a pod subnet of vmlane's
// (routes-only) has the gateway's rules only, and no forwarding chain:
// forwarding there is its own CNI's. Pure: tested by its output.
func Chains(o NATOptions) []Chain {
	pod := o.PodCIDR.String()
	nat, fwd := skeletons()
	if o.PodCIDR.IsValid() {
		for _, c := range o.Cluster {
			nat.Rules = append(nat.Rules, append(append([]string{"-s", pod, "-d", c.String()}, comment("pod to pod network "+c.String()+", no NAT")...), "-j", "RETURN"))
		}
		if o.RouteServices {
			for _, c := range o.Services {
				nat.Rules = append(nat.Rules, append(append([]string{"-s", pod, "-d", c.String()}, comment("pod to Service network "+c.String()+" via a Service gateway, no NAT")...), "-j", "RETURN"))
			}
		}
		if o.Masquerade {
			nat.Rules = append(nat.Rules, append(append([]string{"-s", pod}, comment("pod to outside, masquerade")...), "-j", "MASQUERADE"))
		}
	}
	if !o.RouteServices {
		for _, c := range o.ServiceClients {
			for _, svc := range o.Services {
				nat.Rules = append(nat.Rules, append(append([]string{"-s", c.String(), "-m", "conntrack", "--ctstate", "DNAT", "--ctorigdst", svc.String()},
					comment("Service gateway: "+c.String()+" to Service network "+svc.String()+", masquerade")...), "-j", "MASQUERADE"))
			}
		}
	}
	if !o.PodCIDR.IsValid() {
		return []Chain{nat}
	}
	fwd.Rules = [][]string{
		append(append([]string{"-s", pod}, comment("forward from pods")...), "-j", "ACCEPT"),
		append(append([]string{"-d", pod}, comment("forward to pods")...), "-j", "ACCEPT"),
	}
	return []Chain{nat, fwd}
}

// EnsureChains makes each chain hold exactly its rules, in order, and the
// jump to it exist. Every chain with any rule missing, extra or out of
// place is replaced whole, all of them in one iptables-restore, so no
// packet ever meets a half-filled chain: flushing and appending rule by
// rule left a moment in which a new connection from a pod could leave
// un-NATed for good (conntrack keeps its first decision) and forwarded
// packets could meet FORWARD's policy, as kube-proxy found before it moved
// to iptables-restore. It reports whether it changed anything.
func EnsureChains(ipt iptablesInterface, chains []Chain) (bool, error) {
	changed := false
	var errs []error
	var replace []Chain
	for _, c := range chains {
		ok, err := chainIntact(ipt, c)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok {
			replace = append(replace, c)
		}
	}
	if len(replace) > 0 {
		changed = true
		if err := ipt.Restore(RestoreInput(replace)); err != nil {
			// The jumps below would lead into chains that may not
			// exist: report and retry the whole at the next reconcile.
			return changed, errors.Join(append(errs, fmt.Errorf("replacing chains: %w", err))...)
		}
	}
	for _, c := range chains {
		jump := c.jump()
		exists, err := ipt.Exists(c.Table, c.From, jump...)
		if err != nil {
			errs = append(errs, fmt.Errorf("checking jump %s -> %s: %w", c.From, c.Name, err))
			continue
		}
		if !exists {
			changed = true
			// First, so no rule of another owner before it can accept
			// or NAT pod traffic first.
			if err := ipt.Insert(c.Table, c.From, 1, jump...); err != nil {
				errs = append(errs, fmt.Errorf("adding jump %s -> %s: %w", c.From, c.Name, err))
			}
		}
	}
	return changed, errors.Join(errs...)
}

// RestoreInput renders chains as iptables-restore input that, with
// --noflush, replaces each one whole: a table's chains in one commit, each
// declared (which creates it, or flushes it) and then filled. Pure: tested
// by its output.
func RestoreInput(chains []Chain) []byte {
	var tables []string
	byTable := map[string][]Chain{}
	for _, c := range chains {
		if _, ok := byTable[c.Table]; !ok {
			tables = append(tables, c.Table)
		}
		byTable[c.Table] = append(byTable[c.Table], c)
	}
	var b strings.Builder
	for _, t := range tables {
		fmt.Fprintf(&b, "*%s\n", t)
		for _, c := range byTable[t] {
			fmt.Fprintf(&b, ":%s - [0:0]\n", c.Name)
		}
		for _, c := range byTable[t] {
			for _, r := range c.Rules {
				b.WriteString("-A " + c.Name)
				for _, arg := range r {
					b.WriteString(" " + restoreQuote(arg))
				}
				b.WriteString("\n")
			}
		}
		b.WriteString("COMMIT\n")
	}
	return []byte(b.String())
}

// restoreQuote quotes an argument for iptables-restore, which splits a
// rule on white space outside double quotes and takes \" and \\ inside
// them as the characters.
func restoreQuote(arg string) string {
	if arg != "" && !strings.ContainsAny(arg, " \t\"'\\") {
		return arg
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(arg) + `"`
}

// jump is the rule in From that reaches the chain.
func (c Chain) jump() []string {
	return []string{"-m", "comment", "--comment", c.JumpComment, "-j", c.Name}
}

func chainIntact(ipt iptablesInterface, c Chain) (bool, error) {
	exists, err := ipt.ChainExists(c.Table, c.Name)
	if err != nil || !exists {
		return false, err
	}
	lines, err := ipt.List(c.Table, c.Name)
	if err != nil {
		return false, fmt.Errorf("listing %s/%s: %w", c.Table, c.Name, err)
	}
	n := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "-A ") {
			n++
		}
	}
	if n != len(c.Rules) {
		return false, nil
	}
	for _, r := range c.Rules {
		ok, err := ipt.Exists(c.Table, c.Name, r...)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// RemoveChains deletes the jumps and the chains: what `vmlanectl teardown`
// does. Missing pieces are not errors.
func RemoveChains(ipt iptablesInterface, chains []Chain) error {
	var errs []error
	for _, c := range chains {
		jump := c.jump()
		for {
			ok, err := ipt.Exists(c.Table, c.From, jump...)
			if err != nil || !ok {
				break
			}
			if err := ipt.Delete(c.Table, c.From, jump...); err != nil {
				errs = append(errs, err)
				break
			}
		}
		exists, err := ipt.ChainExists(c.Table, c.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !exists {
			continue
		}
		if err := ipt.ClearChain(c.Table, c.Name); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := ipt.DeleteChain(c.Table, c.Name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

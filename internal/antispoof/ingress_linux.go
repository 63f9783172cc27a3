package antispoof

import (
	"fmt"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// The netdev table holds one base chain per checked port, named as the
// port and bound to its link's ingress hook, and a copy of the macs set.
// A chain can be made only for a link that exists (before Linux 6.16), so
// the CNI plugin makes it between creating the veth and joining it to the
// bridge (Attach), and Sync makes the missing ones of links that exist.
// When the link goes, kernels before 6.16 remove its chain; later ones
// keep it, unbound, until Sync or Remove does.

func netdevMACsSet(table *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: table, Name: netdevMACs, Concatenation: true,
		KeyType: nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeEtherAddr)}
}

// ingressChain is port's chain in the netdev table nd.
func ingressChain(nd *nftables.Table, port string) *nftables.Chain {
	accept := nftables.ChainPolicyAccept
	return &nftables.Chain{Name: port, Table: nd, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookIngress, Priority: nftables.ChainPriorityRef(ingressPriority),
		Device: port, Policy: &accept}
}

// queueAttach adds port's chain to c's batch with its rules: added (a
// no-op when present), flushed, its rules added.
func queueAttach(c *conn, port string) {
	ch := c.AddChain(ingressChain(c.nd, port))
	c.FlushChain(ch)
	for _, r := range ingressRules {
		c.AddRule(&nftables.Rule{Table: c.nd, Chain: ch, Exprs: r.exprs, UserData: comment("ingress", r.name)})
	}
}

// ingressChains lists the netdev table's chains by name; none when there
// is no table.
func ingressChains(c *conn) (map[string]*nftables.Chain, error) {
	all, err := c.ListChainsOfTableFamily(nftables.TableFamilyNetdev)
	if err != nil {
		if isNotExist(err) || unsupported(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("antispoof: listing netdev chains: %w", err)
	}
	out := map[string]*nftables.Chain{}
	for _, ch := range all {
		if ch.Table.Name == c.nd.Name {
			out[ch.Name] = ch
		}
	}
	return out, nil
}

// ingressProblem says what is wrong with a port's chain: its hook,
// priority or policy, or its rules (by their comments).
func ingressProblem(c *conn, ch *nftables.Chain) (string, error) {
	if p := chainProblem(ch, ingressChain(c.nd, ch.Name)); p != "" {
		return p, nil
	}
	return rulesProblem(c, c.nd, ch, "ingress", ingressRules)
}

// ingressPlan compares the netdev table's chains with the ports after
// holds: the ports whose link exists and has no chain (attach), the chains
// of ports after lacks (detach), and the chains of ports after holds that
// are not as queueAttach writes them (repair, each with what is wrong in
// the caller's log through Repaired).
func ingressPlan(c *conn, after []Port) (attach, detach, repair []string, err error) {
	chains, err := ingressChains(c)
	if err != nil {
		return nil, nil, nil, err
	}
	links, err := linkNames(c.netns)
	if err != nil {
		return nil, nil, nil, err
	}
	names := map[string]bool{}
	for _, p := range after {
		names[p.Name] = true
		ch, ok := chains[p.Name]
		switch {
		case !ok && links[p.Name]:
			attach = append(attach, p.Name)
		case ok:
			why, err := ingressProblem(c, ch)
			if err != nil {
				return nil, nil, nil, err
			}
			if why != "" {
				repair = append(repair, p.Name)
			}
		}
	}
	for name := range chains {
		if !names[name] {
			detach = append(detach, name)
		}
	}
	slices.Sort(attach)
	slices.Sort(detach)
	slices.Sort(repair)
	return attach, detach, repair, nil
}

// verifyIngress is verify's part for the netdev table: the table and its
// set, and each chain's shape. Which ports have chains is Sync's to say.
func verifyIngress(c *conn) ([]string, error) {
	if _, err := c.ListTableOfFamily(c.nd.Name, nftables.TableFamilyNetdev); err != nil {
		if isNotExist(err) {
			return []string{"netdev table missing"}, nil
		}
		return nil, fmt.Errorf("antispoof: looking up table netdev %s: %w", c.nd.Name, err)
	}
	var problems []string
	s, err := c.GetSetByName(c.nd, netdevMACs)
	switch {
	case isNotExist(err):
		problems = append(problems, "netdev set "+netdevMACs+" missing")
	case err != nil:
		return nil, fmt.Errorf("antispoof: reading netdev set %s: %w", netdevMACs, err)
	case s.KeyType.Bytes != netdevMACsSet(c.nd).KeyType.Bytes || s.IsMap || s.Interval:
		problems = append(problems, "netdev set "+netdevMACs+" changed")
	}
	chains, err := ingressChains(c)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(chains))
	for name := range chains {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		why, err := ingressProblem(c, chains[name])
		if err != nil {
			return nil, err
		}
		if why != "" {
			problems = append(problems, "ingress chain "+name+" "+why)
		}
	}
	return problems, nil
}

// linkNames lists the names of the links of the namespace at path ("" for
// the caller's own).
func linkNames(path string) (map[string]bool, error) {
	h := &netlink.Handle{}
	if path != "" {
		ns, err := netns.GetFromPath(path)
		if err != nil {
			return nil, fmt.Errorf("antispoof: %w", err)
		}
		defer ns.Close()
		if h, err = netlink.NewHandleAt(ns); err != nil {
			return nil, fmt.Errorf("antispoof: %w", err)
		}
		defer h.Close()
	}
	links, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("antispoof: listing links: %w", err)
	}
	out := make(map[string]bool, len(links))
	for _, l := range links {
		out[l.Attrs().Name] = true
	}
	return out, nil
}
func sameKeys(a, b [][]byte) bool {
	del, add := elementDiff(a, b)
	return len(del)+len(add) == 0
}

// hasKeys reports whether any key of keys (ifname-first keys) is one of
// the named ports'.
func hasKeys(keys [][]byte, names []string) bool {
	for _, k := range keys {
		name, _, _ := strings.Cut(string(k[:min(len(k), ifNameSize)]), "\x00")
		if slices.Contains(names, name) {
			return true
		}
	}
	return false
}

package routes

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"syscall"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// The VXLAN device listens on the wildcard address: without a filter, any
// host that reaches the node's UDP port (a pod on the node's own bridge
// among them) could hand it an encapsulated frame with any inner source,
// a pod of another node's included, and the node would route it on. The
// table inet vmlane-vxlan accepts VXLAN on the device's port only from the
// cluster's other nodes (the peers4 and peers6 sets, which Sync keeps to
// the peers whose FDB entries vmlane writes and every other address of the
// underlay's family the Node objects list, TunnelSources), and never from
// vmlane's bridge, whatever the source address says; as Calico's Felix
// drops VXLAN from hosts that are not peers and from workloads.
const (
	// VXLANFilterTable is the inet table of the filter.
	VXLANFilterTable = "vmlane-vxlan"
	vxlanPeers4      = "peers4"
	vxlanPeers6      = "peers6"
	vxlanChain       = "input"
)

// vxlanFilter is the filter of one VXLAN device's port, in the netns the
// tunnel was made in.
type vxlanFilter struct {
	// netns is a handle on that netns, kept open (nil: the caller's).
	netns  *os.File
	port   uint16
	bridge string
}

func (f *vxlanFilter) conn() (*nftables.Conn, error) {
	if f.netns == nil {
		return nftables.New()
	}
	return nftables.New(nftables.WithNetNSFd(int(f.netns.Fd())))
}

var vxlanTable = &nftables.Table{Name: VXLANFilterTable, Family: nftables.TableFamilyINet}

func vxlanSets() []*nftables.Set {
	return []*nftables.Set{
		{Table: vxlanTable, Name: vxlanPeers4, KeyType: nftables.TypeIPAddr},
		{Table: vxlanTable, Name: vxlanPeers6, KeyType: nftables.TypeIP6Addr},
	}
}

func vxlanInputChain() *nftables.Chain {
	accept := nftables.ChainPolicyAccept
	return &nftables.Chain{Name: vxlanChain, Table: vxlanTable, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept}
}

type vxlanRule struct {
	name  string
	exprs []expr.Any
}

// rules are the filter's rules; each drop counts.
func (f *vxlanFilter) rules() []vxlanRule {
	udp := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_UDP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{byte(f.port >> 8), byte(f.port)}},
	}
	drop := []expr.Any{&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop}}
	family := func(nfproto byte) []expr.Any {
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{nfproto}},
		}
	}
	stranger := func(off, n uint32, set string) []expr.Any {
		return []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
			&expr.Lookup{SourceRegister: 1, SetName: set, Invert: true},
		}
	}
	name := make([]byte, 16)
	copy(name, f.bridge)
	return []vxlanRule{
		{"from vmlane's bridge", slices.Concat(udp, []expr.Any{
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: name},
		}, drop)},
		{"ipv4 from a stranger", slices.Concat(family(unix.NFPROTO_IPV4), udp, stranger(12, 4, vxlanPeers4), drop)},
		{"ipv6 from a stranger", slices.Concat(family(unix.NFPROTO_IPV6), udp, stranger(8, 16, vxlanPeers6), drop)},
	}
}

func vxlanComment(name string) []byte {
	return userdata.AppendString(nil, userdata.TypeComment, "vmlane: vxlan: "+name)
}

// ensure writes the table whole (sets, chain, rules) when verify finds it
// missing or changed, in one transaction; the peers are Sync's.
func (f *vxlanFilter) ensure() error {
	c, err := f.conn()
	if err != nil {
		return fmt.Errorf("VXLAN filter: %w", err)
	}
	if f.verify(c) == nil {
		return nil
	}
	c.AddTable(vxlanTable)
	for _, s := range vxlanSets() {
		if err := c.AddSet(s, nil); err != nil {
			return fmt.Errorf("VXLAN filter: set %s: %w", s.Name, err)
		}
	}
	ch := c.AddChain(vxlanInputChain())
	c.FlushChain(ch)
	for _, r := range f.rules() {
		c.AddRule(&nftables.Rule{Table: vxlanTable, Chain: ch, Exprs: r.exprs, UserData: vxlanComment(r.name)})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("VXLAN filter: writing table inet %s: %w", VXLANFilterTable, err)
	}
	return nil
}

// verify says what is wrong with the table: missing, a set missing, the
// chain's hook, or its rules (by their comments, which hold the port and
// bridge they were written for).
func (f *vxlanFilter) verify(c *nftables.Conn) error {
	sets, err := c.GetSets(vxlanTable)
	if err != nil {
		return fmt.Errorf("table inet %s missing or unreadable: %v", VXLANFilterTable, err)
	}
	for _, want := range vxlanSets() {
		if !slices.ContainsFunc(sets, func(s *nftables.Set) bool { return s.Name == want.Name && s.KeyType.Bytes == want.KeyType.Bytes }) {
			return fmt.Errorf("set %s missing", want.Name)
		}
	}
	ch, err := c.ListChain(vxlanTable, vxlanChain)
	if err != nil {
		return fmt.Errorf("chain %s missing: %v", vxlanChain, err)
	}
	if ch.Hooknum == nil || *ch.Hooknum != *nftables.ChainHookInput || ch.Priority == nil || *ch.Priority != *nftables.ChainPriorityFilter {
		return errors.New("chain input's hook changed")
	}
	rules, err := c.GetRules(vxlanTable, ch)
	if err != nil {
		return err
	}
	var got, want []string
	for _, r := range rules {
		s, _ := userdata.GetString(r.UserData, userdata.TypeComment)
		got = append(got, s)
	}
	for _, r := range f.rules() {
		s, _ := userdata.GetString(vxlanComment(r.name), userdata.TypeComment)
		want = append(want, s)
	}
	if !slices.Equal(got, want) {
		return fmt.Errorf("rules %q, want %q", got, want)
	}
	// The rules' comments do not say which port and bridge they match:
	// compare the expressions of the first (both are in it).
	if len(rules) > 0 && !sameExprs(rules[0].Exprs, f.rules()[0].exprs) {
		return errors.New("rules of another port or bridge")
	}
	return nil
}

// sameExprs compares the Cmp data of two rules' expressions, which is
// where the port and the bridge's name are.
func sameExprs(a, b []expr.Any) bool {
	data := func(es []expr.Any) []string {
		var out []string
		for _, e := range es {
			if c, ok := e.(*expr.Cmp); ok {
				out = append(out, string(c.Data))
			}
		}
		return out
	}
	return slices.Equal(data(a), data(b))
}

// sync makes the peer sets hold exactly the addresses from.
func (f *vxlanFilter) sync(from []netip.Addr) error {
	c, err := f.conn()
	if err != nil {
		return fmt.Errorf("VXLAN filter: %w", err)
	}
	want := map[string][][]byte{}
	for _, a := range from {
		if a.Is4() {
			b := a.As4()
			want[vxlanPeers4] = append(want[vxlanPeers4], b[:])
		} else {
			b := a.As16()
			want[vxlanPeers6] = append(want[vxlanPeers6], b[:])
		}
	}
	changed := false
	for _, s := range vxlanSets() {
		elems, err := c.GetSetElements(s)
		if err != nil {
			return fmt.Errorf("VXLAN filter: reading set %s: %w", s.Name, err)
		}
		have := map[string]bool{}
		var del []nftables.SetElement
		for _, e := range elems {
			have[string(e.Key)] = true
			if !slices.ContainsFunc(want[s.Name], func(k []byte) bool { return string(k) == string(e.Key) }) {
				del = append(del, nftables.SetElement{Key: e.Key})
			}
		}
		var add []nftables.SetElement
		for _, k := range want[s.Name] {
			if !have[string(k)] {
				add = append(add, nftables.SetElement{Key: k})
				have[string(k)] = true
			}
		}
		// Add before delete: a peer whose address changes is never
		// refused in between.
		if len(add) > 0 {
			changed = true
			if err := c.SetAddElements(s, add); err != nil {
				return fmt.Errorf("VXLAN filter: set %s: %w", s.Name, err)
			}
		}
		if len(del) > 0 {
			changed = true
			if err := c.SetDeleteElements(s, del); err != nil {
				return fmt.Errorf("VXLAN filter: set %s: %w", s.Name, err)
			}
		}
	}
	if !changed {
		return nil
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("VXLAN filter: writing peers: %w", err)
	}
	return nil
}

// removeVXLANFilter deletes the table, if there is one, in the caller's
// netns.
func removeVXLANFilter() error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	if _, err := c.ListTableOfFamily(VXLANFilterTable, nftables.TableFamilyINet); err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.EAFNOSUPPORT) || errors.Is(err, syscall.EOPNOTSUPP) {
			return nil
		}
		return fmt.Errorf("looking up table inet %s: %w", VXLANFilterTable, err)
	}
	c.DelTable(vxlanTable)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("deleting table inet %s: %w", VXLANFilterTable, err)
	}
	return nil
}

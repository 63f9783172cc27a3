package bridge

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// A VM that left its home node (a live migration, a move) keeps its
// addresses, and the home node routes them to where it runs now; but its
// pods and guests, which share the VM's subnet, reach it at layer 2. Their
// neighbour entries still name the VM's MAC, which the home bridge sends
// to the VM's old port (a source pod whose QEMU is paused) or floods: the
// node's own pods lost a migrated VM until their ARP or ND entries aged out
// (seen in TestVMLiveMigration, tens of seconds). The table bridge
// vmlane-away sends frames to the MACs of this node's VMs that run
// elsewhere up to the node instead, as ebtables' redirect does: their
// destination MAC becomes the bridge's and their packet type host, and the
// node routes them to the VM's node. The pods' next ARP or ND probe, sent
// the same way, gets the node's proxy answer, and their entries move to
// the bridge's MAC.
//
// The guest has the same entries the other way round: on the node it moved
// to, it sends to its home subnet's pods at layer 2, to MACs no port of
// this bridge has. So a unicast IPv4 or IPv6 packet from the port of a VM
// that moved in (the ports set) goes up to the node too, which routes it
// home, unless it is for this node's own pod subnets (local) or an IPv6
// link-local address: a guest and a pod of this node that resolved each
// other at layer 2 (nothing of vmlane's tells them to: the node's
// redirects and router advertisements are dropped, below) talk directly,
// and their neighbour exchange must stay between them. Its own gateway's
// MAC is the bridge's already (every node's bridge has the same MAC), so
// nothing else changes. ARP is left alone: the guest's probes to stale
// MACs fail, and its next request gets the node's proxy answer.
const (
	// AwayTable is the bridge family table of the away MACs.
	AwayTable     = "vmlane-away"
	awayTableName = AwayTable
	awaySet       = "macs"
	awayPortsSet  = "ports"
	awayChain     = "prerouting"
	awayOutChain  = "output"
	// awayPriority is the bridge family's destination NAT priority
	// (NF_BR_PRI_NAT_DST_BRIDGED), before the forwarding decision.
	awayPriority = -300
)

var awayTable = &nftables.Table{Name: awayTableName, Family: nftables.TableFamilyBridge}

func awayMACSet() *nftables.Set {
	return &nftables.Set{Table: awayTable, Name: awaySet, KeyType: nftables.TypeEtherAddr}
}

func awayPortSet() *nftables.Set {
	return &nftables.Set{Table: awayTable, Name: awayPortsSet, KeyType: nftables.TypeIFName}
}

type awayRuleSpec struct {
	comment string
	match   []expr.Any
}

// awayRules are the table's rules for a node whose own pod subnets are
// local: a frame they match goes up to the node (toHost).
func awayRules(local []netip.Prefix) []awayRuleSpec {
	rules := []awayRuleSpec{
		{"frames to a VM that runs on another node go up to the node, which routes them there", []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseLLHeader, Offset: 0, Len: 6},
			&expr.Lookup{SourceRegister: 1, SetName: awaySet},
		}},
	}
	fromMovedIn := func(ethertype uint16) []expr.Any {
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			&expr.Lookup{SourceRegister: 1, SetName: awayPortsSet},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseLLHeader, Offset: 0, Len: 1},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{0x01}, Xor: []byte{0x00}},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0x00}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseLLHeader, Offset: 12, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{byte(ethertype >> 8), byte(ethertype)}},
		}
	}
	// notIn: the destination address (at off, n bytes) is outside p.
	notIn := func(off, n uint32, p netip.Prefix) []expr.Any {
		mask := net.CIDRMask(p.Bits(), int(n)*8)
		return []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: n, Mask: mask, Xor: make([]byte, n)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: p.Masked().Addr().AsSlice()},
		}
	}
	v4 := fromMovedIn(unix.ETH_P_IP)
	v6 := slices.Concat(fromMovedIn(unix.ETH_P_IPV6), notIn(24, 16, netip.MustParsePrefix("fe80::/10")))
	var off4, off6 []string
	for _, p := range local {
		if p.Addr().Is4() {
			v4 = append(v4, notIn(16, 4, p)...)
			off4 = append(off4, p.String())
		} else {
			v6 = append(v6, notIn(24, 16, p)...)
			off6 = append(off6, p.String())
		}
	}
	return append(rules,
		awayRuleSpec{fmt.Sprintf("unicast IPv4 of a VM that moved in, but to %v, goes up to the node, which routes it home", off4), v4},
		awayRuleSpec{fmt.Sprintf("unicast IPv6 of a VM that moved in, but to fe80::/10 and %v, goes up to the node, which routes it home", off6), v6})
}

// outputRules are the output chain's, for what the node itself sends onto
// the bridge:
//
//   - its ICMP and ICMPv6 redirects are dropped. The node sends one when
//     it forwards a packet back onto the bridge, which it does between
//     this node's pods and a VM that moved in (whose host route is on the
//     bridge though its address is not of the bridge's subnet): the
//     redirect tells each to reach the other at layer 2, by its MAC, and
//     once the VM moves on (a live migration back, or further) those
//     entries and the redirected route name a MAC no port of the bridge
//     has. Without the redirect they keep going through the node, which
//     routes them wherever the VM runs. Linux has no knob for IPv6's
//     redirects, and IPv4's send_redirects is or-ed with "all".
//   - its router advertisements are dropped on the ports of VMs that
//     moved in (set ports): they announce this node's pod subnet on-link,
//     and a guest that took it for on-link would resolve this node's pods
//     by neighbour discovery, and keep doing so after it moved on, where
//     no one answers (seen in TestVMLiveMigration: the target's pods lost
//     the VM over IPv6 for good after it migrated back home). vmlaned
//     sends those guests their home's advertisements itself
//     (internal/ndproxy).
func outputRules() []awayRuleSpec {
	icmp := func(proto, typ byte) []expr.Any {
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{typ}},
		}
	}
	drop := []expr.Any{&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop}}
	toMovedIn := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Lookup{SourceRegister: 1, SetName: awayPortsSet},
	}
	return []awayRuleSpec{
		{"the node's ICMP redirects to pods and VMs are dropped: they would reach a VM that moved in, and it them, at layer 2 until it moves on", slices.Concat(icmp(unix.IPPROTO_ICMP, 5), drop)},
		{"the node's ICMPv6 redirects to pods and VMs are dropped: they would reach a VM that moved in, and it them, at layer 2 until it moves on", slices.Concat(icmp(unix.IPPROTO_ICMPV6, 137), drop)},
		{"the node's router advertisements do not reach a VM that moved in: vmlaned sends it its home's", slices.Concat(toMovedIn, icmp(unix.IPPROTO_ICMPV6, 134), drop)},
	}
}

// toHost makes a frame the node's: its destination MAC the bridge's
// (brMAC), its packet type host, as ebtables' redirect does.
func toHost(brMAC net.HardwareAddr) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: brMAC},
		&expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: 1, Base: expr.PayloadBaseLLHeader, Offset: 0, Len: 6},
		&expr.Immediate{Register: 1, Data: []byte{unix.PACKET_HOST}},
		&expr.Meta{Key: expr.MetaKeyPKTTYPE, SourceRegister: true, Register: 1},
		&expr.Counter{},
	}
}

func awayComment(s string) []byte {
	return userdata.AppendString(nil, userdata.TypeComment, "vmlane: "+s)
}

// SyncAway makes the table hold exactly macs (of VMs away from this node)
// and ports (of VMs that moved in) for the bridge br of a node whose own
// pod subnets are local: the table, its chain and rules written anew when
// missing, for other subnets or naming another bridge MAC, the sets'
// elements replaced. With neither and no table it writes nothing.
func SyncAway(br string, local []netip.Prefix, macs, ports []string) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("table bridge %s: %w", awayTableName, err)
	}
	var want []nftables.SetElement
	for _, m := range macs {
		hw, err := net.ParseMAC(m)
		if err != nil || len(hw) != 6 {
			continue
		}
		want = append(want, nftables.SetElement{Key: hw})
	}
	var wantPorts []nftables.SetElement
	for _, p := range ports {
		if p != "" && len(p) < 16 {
			k := make([]byte, 16)
			copy(k, p)
			wantPorts = append(wantPorts, nftables.SetElement{Key: k})
		}
	}
	sets, err := c.GetSets(awayTable)
	exists := err == nil && slices.ContainsFunc(sets, func(s *nftables.Set) bool { return s.Name == awaySet }) &&
		slices.ContainsFunc(sets, func(s *nftables.Set) bool { return s.Name == awayPortsSet })
	if !exists && len(want) == 0 && len(wantPorts) == 0 {
		return nil
	}
	l, err := netlinksafe.LinkByName(br)
	if err != nil {
		return fmt.Errorf("looking up %s: %w", br, err)
	}
	link := l.Attrs().HardwareAddr
	if !exists || !awayRuleIs(c, link, local) {
		c.AddTable(awayTable)
		c.FlushTable(awayTable)
		for _, set := range []*nftables.Set{awayMACSet(), awayPortSet()} {
			if err := c.AddSet(set, nil); err != nil {
				return fmt.Errorf("table bridge %s: %w", awayTableName, err)
			}
		}
		ch := c.AddChain(&nftables.Chain{Name: awayChain, Table: awayTable, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRef(awayPriority)})
		for _, r := range awayRules(local) {
			c.AddRule(&nftables.Rule{Table: awayTable, Chain: ch, Exprs: slices.Concat(r.match, toHost(link)), UserData: awayComment(r.comment)})
		}
		out := c.AddChain(&nftables.Chain{Name: awayOutChain, Table: awayTable, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter})
		for _, r := range outputRules() {
			c.AddRule(&nftables.Rule{Table: awayTable, Chain: out, Exprs: r.match, UserData: awayComment(r.comment)})
		}
	}
	for _, e := range []struct {
		set  *nftables.Set
		want []nftables.SetElement
	}{{awayMACSet(), want}, {awayPortSet(), wantPorts}} {
		c.FlushSet(e.set)
		if len(e.want) > 0 {
			if err := c.SetAddElements(e.set, e.want); err != nil {
				return err
			}
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("writing table bridge %s: %w", awayTableName, err)
	}
	return nil
}

// awayRuleIs reports whether the table's rules are there (by their
// comments, which name the local subnets) and rewrite to brMAC.
func awayRuleIs(c *nftables.Conn, brMAC net.HardwareAddr, local []netip.Prefix) bool {
	out, err := c.GetRules(awayTable, &nftables.Chain{Name: awayOutChain, Table: awayTable})
	if err != nil || len(out) != len(outputRules()) {
		return false
	}
	for i, r := range out {
		if got, _ := userdata.GetString(r.UserData, userdata.TypeComment); got != "vmlane: "+outputRules()[i].comment {
			return false
		}
	}
	rules, err := c.GetRules(awayTable, &nftables.Chain{Name: awayChain, Table: awayTable})
	want := awayRules(local)
	if err != nil || len(rules) != len(want) {
		return false
	}
	for i, r := range rules {
		got, _ := userdata.GetString(r.UserData, userdata.TypeComment)
		if got != "vmlane: "+want[i].comment {
			return false
		}
		for _, e := range r.Exprs {
			if im, ok := e.(*expr.Immediate); ok && len(im.Data) == 6 && !slices.Equal(im.Data, brMAC) {
				return false
			}
		}
	}
	return true
}

// DeleteAway removes the table (teardown); none is no error.
func DeleteAway() error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	c.DelTable(awayTable)
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}

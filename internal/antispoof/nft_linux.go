package antispoof

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/google/nftables"
	"github.com/google/nftables/userdata"
)

// Table is one of vmlane's tables in one network namespace: the bridge
// family's table of that name and the netdev family's table of the same
// name, which holds the ingress chains of its ports.
type Table struct {
	// NetNS is the path of the network namespace; empty is the
	// caller's own.
	NetNS string
	// Name is the table's name (plugin.AntiSpoofTable names the table
	// of a bridge); empty is TableName.
	Name string
	// Routers6 are the node's IPv6 link-local addresses on the bridge,
	// which no port may send from or advertise. Add writes them with a
	// table it makes, Sync makes the table hold exactly these; nil
	// leaves what the table holds.
	Routers6 []netip.Addr
}

// conn is a netlink connection to a Table's namespace, and the tables.
type conn struct {
	*nftables.Conn
	tb *nftables.Table // bridge family
	nd *nftables.Table // netdev family, same name
	// netns is the namespace's path ("" for the caller's own), for
	// reading its links.
	netns string
}

// conn opens one netlink socket for a whole operation (its reads and its
// transaction): closing an nftables socket waits, under the kernel's
// nftables commit lock, for the work other processes' deletions left
// (nft_rcv_nl_event), so a socket per call, as google/nftables opens by
// default, made each CNI ADD wait that many times behind concurrent ones.
func (t Table) conn() (*conn, func(), error) {
	name := t.Name
	if name == "" {
		name = TableName
	}
	tb := &nftables.Table{Name: name, Family: nftables.TableFamilyBridge}
	nd := &nftables.Table{Name: name, Family: nftables.TableFamilyNetdev}
	if t.NetNS == "" {
		c, err := nftables.New(nftables.AsLasting())
		if err != nil {
			return nil, nil, err
		}
		return &conn{c, tb, nd, ""}, func() { c.CloseLasting() }, nil
	}
	f, err := os.Open(t.NetNS)
	if err != nil {
		return nil, nil, fmt.Errorf("antispoof: %w", err)
	}
	c, err := nftables.New(nftables.AsLasting(), nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return &conn{c, tb, nd, t.NetNS}, func() { c.CloseLasting(); f.Close() }, nil
}

func sets(table *nftables.Table) []*nftables.Set {
	return []*nftables.Set{
		{Table: table, Name: setPorts, KeyType: nftables.TypeIFName},
		{Table: table, Name: setMACs, Concatenation: true,
			KeyType: nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeEtherAddr)},
		{Table: table, Name: setAddrs, Concatenation: true,
			KeyType: nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeEtherAddr, nftables.TypeIPAddr)},
		{Table: table, Name: setAddrs6, Concatenation: true,
			KeyType: nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeEtherAddr, nftables.TypeIP6Addr)},
	}
}

// routers6Set is the bridge table's set of the node's link-local
// addresses; it is not keyed by port, so it stays out of sets.
func routers6Set(table *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: table, Name: setRouters6, KeyType: nftables.TypeIP6Addr}
}

// basePriority is the bridge family's filter priority
// (NF_BR_PRI_FILTER_BRIDGED).
const basePriority = -200

func chain(table *nftables.Table, name string) *nftables.Chain {
	c := &nftables.Chain{Name: name, Table: table}
	if name == chainPorts {
		c.Type = nftables.ChainTypeFilter
		c.Hooknum = nftables.ChainHookPrerouting
		c.Priority = nftables.ChainPriorityRef(basePriority)
		accept := nftables.ChainPolicyAccept
		c.Policy = &accept
	}
	return c
}

// comment is the userdata every rule carries: its name, which Verify
// reads back.
func comment(chain, name string) []byte {
	return userdata.AppendString(nil, userdata.TypeComment, "vmlane: "+chain+": "+name)
}

// queueEnsure adds the whole table to c's batch: table, sets and chains
// (no-ops when present, elements kept), then each chain flushed and its
// rules added; and the netdev table with its set (its chains are the
// ports', see queueAttach).
func queueEnsure(c *conn) error {
	c.AddTable(c.tb)
	for _, s := range append(sets(c.tb), routers6Set(c.tb)) {
		if err := c.AddSet(s, nil); err != nil {
			return fmt.Errorf("antispoof: set %s: %w", s.Name, err)
		}
	}
	// Regular chains first: the base chain's rules jump to them.
	for _, spec := range slices.Backward(layout) {
		c.AddChain(chain(c.tb, spec.name))
	}
	for _, spec := range layout {
		ch := chain(c.tb, spec.name)
		c.FlushChain(ch)
		for _, r := range spec.rules {
			c.AddRule(&nftables.Rule{Table: c.tb, Chain: ch, Exprs: r.exprs, UserData: comment(spec.name, r.name)})
		}
	}
	c.AddTable(c.nd)
	if err := c.AddSet(netdevMACsSet(c.nd), nil); err != nil {
		return fmt.Errorf("antispoof: netdev set %s: %w", netdevMACs, err)
	}
	return nil
}

// queueRouters6 adds to c's batch what makes the routers6 set hold
// exactly want, have being what it holds.
func queueRouters6(c *conn, have []netip.Addr, want []netip.Addr) error {
	key := func(a netip.Addr) []byte { b := a.As16(); return b[:] }
	var h, w [][]byte
	for _, a := range have {
		h = append(h, key(a))
	}
	for _, a := range want {
		if a.Is6() && !a.Is4In6() {
			w = append(w, key(a))
		}
	}
	return queueElements(c, routers6Set(c.tb), h, w)
}

func flush(c *conn, what string) error {
	if err := c.Flush(); err != nil {
		if unsupported(err) {
			return fmt.Errorf("%w (%s: %v)", ErrNoKernelSupport, what, err)
		}
		return fmt.Errorf("antispoof: %s: %w", what, err)
	}
	return nil
}

// Ensure writes the table whole, in one transaction. Set elements are
// kept.
func (t Table) Ensure() error {
	c, done, err := t.conn()
	if err != nil {
		return err
	}
	defer done()
	if err := queueEnsure(c); err != nil {
		return err
	}
	return flush(c, "writing table bridge "+c.tb.Name)
}

// Add checks p and makes it the only identity of its port: in one
// transaction it writes the table if it has none (see Ensure), removes
// what the port was allowed before, if anything, and adds p.
//
// An existing table is not written again: its integrity is Sync's job
// (vmlaned's), and a transaction that deletes anything, rules or
// elements, waits for an RCU grace period, about 12 ms here, where one
// that only adds takes about 1 ms (BenchmarkAdd). A fresh attachment
// deletes nothing.
func (t Table) Add(p Port) error { return t.add(p, nil) }

// AddSeen is Add for a caller that has read the table (View) since p's port
// last changed, as the CNI plugin's ADD does to pick its addresses: its
// first try writes against that view rather than reading the table again
// (each read lists every port: a dump of the sets). A view that has gone
// stale by then fails the transaction (an element it deletes is gone, one
// it adds to a set that is gone), and Add reads again.
func (t Table) AddSeen(p Port, v View) error { return t.add(p, &v) }

func (t Table) add(p Port, seen *View) error {
	if err := p.Validate(); err != nil {
		return err
	}
	return t.retry(func(c *conn) error {
		var v View
		if seen != nil {
			v, seen = *seen, nil
		} else {
			var err error
			if v, err = read(c); err != nil {
				return err
			}
		}
		if !v.Exists {
			if err := queueEnsure(c); err != nil {
				return err
			}
			if t.Routers6 != nil {
				if err := queueRouters6(c, v.Routers6, t.Routers6); err != nil {
					return err
				}
			}
			v.ndMACs = nonNil(v.ndMACs) // queueEnsure makes the set
		}
		after := append(without(v.Ports, p.Name), p)
		if err := queueChange(c, v, after); err != nil {
			return err
		}
		return flush(c, "adding port "+p.String())
	})
}

// Attach puts the ingress check of p's port on its link (the host veth),
// which must exist: the CNI plugin calls it after making the veth and
// before the veth joins the bridge, so no frame of the port reaches the
// bridge unchecked. It writes p's MAC into the netdev table too (an add,
// a no-op when there), so that the check holds whatever Add found.
func (t Table) Attach(p Port) error {
	if err := p.Validate(); err != nil {
		return err
	}
	c, done, err := t.conn()
	if err != nil {
		return err
	}
	defer done()
	// A chain the port's earlier link left (Linux 6.16 and later keep a
	// netdev chain whose device went, and bind it to the next device of
	// its name) is the port's already: writing it again would delete its
	// rules, which waits for an RCU grace period under the nftables commit
	// lock (an ADD that retries an attachment, whose DEL left the chain
	// to vmlaned, took 2.3 times the reference plugins' time with it).
	chains, err := ingressChains(c)
	if err != nil {
		return err
	}
	whole := false
	if ch, ok := chains[p.Name]; ok {
		why, err := ingressProblem(c, ch)
		if err != nil {
			return err
		}
		whole = why == ""
	}
	c.AddTable(c.nd)
	s := netdevMACsSet(c.nd)
	if err := c.AddSet(s, nil); err != nil {
		return fmt.Errorf("antispoof: netdev set %s: %w", netdevMACs, err)
	}
	if err := c.SetAddElements(s, []nftables.SetElement{{Key: macKey(p.Name, p.MAC)}}); err != nil {
		return fmt.Errorf("antispoof: netdev set %s: %w", netdevMACs, err)
	}
	if !whole {
		queueAttach(c, p.Name)
	}
	return flush(c, "attaching the ingress check of port "+p.Name)
}

// Remove removes every identity of the named ports, in one transaction.
// A port with none, or no table, is success.
func (t Table) Remove(names ...string) error {
	return t.retry(func(c *conn) error {
		v, err := read(c)
		if err != nil {
			return err
		}
		after := v.Ports
		for _, name := range names {
			after = without(after, name)
		}
		chains, err := ingressChains(c)
		if err != nil {
			return err
		}
		var detach []string
		for _, name := range names {
			if _, ok := chains[name]; ok {
				detach = append(detach, name)
			}
		}
		if len(after) == len(v.Ports) && len(detach) == 0 && !hasKeys(v.ndMACs, names) {
			return nil
		}
		if err := queueChange(c, v, after); err != nil {
			return err
		}
		for _, name := range detach {
			c.DelChain(ingressChain(c.nd, name))
		}
		return flush(c, "removing ports "+strings.Join(names, ", "))
	})
}

// Ports lists the ports the table checks, by name. No table is no ports.
func (t Table) Ports() ([]Port, error) {
	v, err := t.View()
	return v.Ports, err
}

// View reads the table.
func (t Table) View() (View, error) {
	c, done, err := t.conn()
	if err != nil {
		return View{}, err
	}
	defer done()
	return read(c)
}

// Sync makes the table whole (if Verify finds it damaged) and its ports
// want, in one transaction. It returns what it changed, for the log: the
// damage it repaired, and the ports it added and removed.
//
// listed is what Ports returned before the caller read want: only entries
// in it are removed. An entry another process (a CNI ADD) added after
// want was read is not in want, and must stay.
func (t Table) Sync(want, listed []Port) (Changes, error) {
	for _, p := range want {
		if err := p.Validate(); err != nil {
			return Changes{}, err
		}
	}
	var ch Changes
	err := t.retry(func(c *conn) error {
		ch = Changes{}
		damage := verify(c)
		if damage != nil {
			ch.Repaired = damage.Error()
			if err := queueEnsure(c); err != nil {
				return err
			}
		}
		v, err := read(c)
		if err != nil {
			return err
		}
		if damage != nil {
			v.ndMACs = nonNil(v.ndMACs) // queueEnsure makes the set
		}
		after := append(slices.Clip(want), newer(v.Ports, listed)...)
		ch.Added, ch.Removed = diff(v.Ports, after)
		routers := t.Routers6 != nil && !sameAddrs(v.Routers6, t.Routers6)
		if routers {
			if err := queueRouters6(c, v.Routers6, t.Routers6); err != nil {
				return err
			}
		}
		attach, detach, repair, err := ingressPlan(c, after)
		if err != nil {
			return err
		}
		ch.Attached, ch.Detached = attach, detach
		if len(repair) > 0 {
			ch.Repaired = strings.TrimPrefix(ch.Repaired+"; ingress chains changed: "+strings.Join(repair, ", "), "; ")
		}
		ndStale := !sameKeys(v.ndMACs, keysOf(after, 1))
		if ch.Repaired == "" && len(ch.Added)+len(ch.Removed)+len(attach)+len(detach) == 0 && !routers && !ndStale {
			return nil
		}
		if err := queueChange(c, v, after); err != nil {
			return err
		}
		for _, name := range detach {
			c.DelChain(ingressChain(c.nd, name))
		}
		for _, name := range append(attach, repair...) {
			queueAttach(c, name)
		}
		return flush(c, "syncing table bridge "+c.tb.Name)
	})
	return ch, err
}

// Verify returns what is wrong with the table: missing, a set or chain
// missing or changed, a rule missing, changed or added. nil means it is
// as Ensure writes it.
func (t Table) Verify() error {
	c, done, err := t.conn()
	if err != nil {
		return err
	}
	defer done()
	return verify(c)
}

// Delete removes the table and everything in it. No table is success.
func (t Table) Delete() error {
	c, done, err := t.conn()
	if err != nil {
		return err
	}
	defer done()
	n := 0
	for _, tb := range []*nftables.Table{c.tb, c.nd} {
		if _, err := c.ListTableOfFamily(tb.Name, tb.Family); err != nil {
			if isNotExist(err) || unsupported(err) {
				continue
			}
			return fmt.Errorf("antispoof: looking up table %s %s: %w", familyName(tb.Family), tb.Name, err)
		}
		c.DelTable(tb)
		n++
	}
	if n == 0 {
		return nil
	}
	return flush(c, "deleting tables "+c.tb.Name)
}

func familyName(f nftables.TableFamily) string {
	if f == nftables.TableFamilyNetdev {
		return "netdev"
	}
	return "bridge"
}

// retry runs fn on a fresh connection, again when another process's
// transaction removed an element between fn's read and its write (ENOENT
// or EEXIST from the batch).
func (t Table) retry(fn func(c *conn) error) error {
	var err error
	for range 3 {
		c, done, cerr := t.conn()
		if cerr != nil {
			return cerr
		}
		err = fn(c)
		done()
		if !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.EEXIST) {
			return err
		}
	}
	return err
}

func isNotExist(err error) bool { return errors.Is(err, syscall.ENOENT) }

// unsupported reports an error of a kernel without nftables (or without
// its bridge family), where there can be no table to read or remove.
func unsupported(err error) bool {
	return errors.Is(err, syscall.EAFNOSUPPORT) || errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.EPROTONOSUPPORT)
}

// read reads the tables: the ports from the addrs and addrs6 sets, the
// routers6 set, and the netdev table's copy of the macs. Exists is false
// when a set of either table is missing (no table, or one written by a
// vmlane from before the set): Add then writes the tables whole (Ensure
// keeps the elements), and Sync's verify repairs them.
func read(c *conn) (View, error) {
	var v View
	have, err := c.GetSets(c.tb)
	if err != nil {
		// GetSets does not wrap the kernel's error: ask for the table,
		// whose lookup does, to tell no table from a failure.
		if _, terr := c.ListTableOfFamily(c.tb.Name, nftables.TableFamilyBridge); isNotExist(terr) || unsupported(terr) {
			return v, nil
		}
		return v, fmt.Errorf("antispoof: listing the sets of table bridge %s: %w", c.tb.Name, err)
	}
	byName := map[string]*nftables.Set{}
	for _, s := range have {
		byName[s.Name] = s
	}
	elements := func(name string) ([][]byte, error) {
		s := byName[name]
		if s == nil {
			return nil, nil
		}
		elems, err := c.GetSetElements(s)
		if err != nil {
			return nil, fmt.Errorf("antispoof: reading set %s: %w", name, err)
		}
		keys := make([][]byte, len(elems))
		for i, e := range elems {
			keys[i] = e.Key
		}
		return keys, nil
	}
	if byName[setAddrs] == nil {
		return v, nil
	}
	keys, err := elements(setAddrs)
	if err != nil {
		return v, err
	}
	if v.Ports, err = portsFromAddrs(keys); err != nil {
		return v, err
	}
	if keys, err = elements(setAddrs6); err != nil {
		return v, err
	}
	if err := withAddrs6(v.Ports, keys); err != nil {
		return v, err
	}
	if keys, err = elements(setRouters6); err != nil {
		return v, err
	}
	for _, k := range keys {
		if len(k) == 16 {
			v.Routers6 = append(v.Routers6, netip.AddrFrom16([16]byte(k)))
		}
	}
	nd, ndErr := c.GetSetByName(c.nd, netdevMACs)
	switch {
	case ndErr == nil:
		elems, err := c.GetSetElements(nd)
		if err != nil {
			return v, fmt.Errorf("antispoof: reading netdev set %s: %w", netdevMACs, err)
		}
		v.ndMACs = make([][]byte, 0, len(elems))
		for _, e := range elems {
			v.ndMACs = append(v.ndMACs, e.Key)
		}
	case !isNotExist(ndErr) && !unsupported(ndErr):
		return v, fmt.Errorf("antispoof: reading netdev set %s: %w", netdevMACs, ndErr)
	}
	v.Exists = byName[setAddrs6] != nil && byName[setRouters6] != nil && v.ndMACs != nil
	return v, nil
}

// queueChange adds to c's batch what turns the ports v holds into after:
// each set's elements that after lacks are deleted, the ones it adds are
// added, in both tables. Elements two ports share (a port with two
// addresses has one name and one MAC) stay while any port needs them. A
// netdev set that neither exists nor is made in this batch (v.ndMACs nil:
// a table of a vmlane from before it) is left to the next Add or Sync,
// which make it.
func queueChange(c *conn, v View, after []Port) error {
	for i, s := range sets(c.tb) {
		if err := queueElements(c, s, keysOf(v.Ports, i), keysOf(after, i)); err != nil {
			return err
		}
	}
	if v.ndMACs == nil {
		return nil
	}
	return queueElements(c, netdevMACsSet(c.nd), v.ndMACs, keysOf(after, 1))
}

// nonNil is keys, or an empty slice for none.
func nonNil(keys [][]byte) [][]byte {
	if keys == nil {
		return [][]byte{}
	}
	return keys
}

func queueElements(c *conn, s *nftables.Set, have, want [][]byte) error {
	del, add := elementDiff(have, want)
	if len(del) > 0 {
		if err := c.SetDeleteElements(s, del); err != nil {
			return fmt.Errorf("antispoof: set %s: %w", s.Name, err)
		}
	}
	if len(add) > 0 {
		if err := c.SetAddElements(s, add); err != nil {
			return fmt.Errorf("antispoof: set %s: %w", s.Name, err)
		}
	}
	return nil
}

// keysOf returns the ports' keys in the set sets(table)[i]: ports, macs,
// addrs, addrs6 (of the ports that have an IPv6 address).
func keysOf(ports []Port, i int) [][]byte {
	keys := make([][]byte, 0, len(ports))
	for _, p := range ports {
		switch i {
		case 0:
			keys = append(keys, ifnameKey(p.Name))
		case 1:
			keys = append(keys, macKey(p.Name, p.MAC))
		case 2:
			keys = append(keys, addrKey(p.Name, p.MAC, p.IP))
		default:
			if p.IP6.IsValid() {
				keys = append(keys, addr6Key(p.Name, p.MAC, p.IP6))
			}
		}
	}
	return keys
}

func elementDiff(have, want [][]byte) (del, add []nftables.SetElement) {
	h, w := map[string]bool{}, map[string]bool{}
	for _, k := range have {
		h[string(k)] = true
	}
	for _, k := range want {
		w[string(k)] = true
	}
	for _, k := range have {
		if !w[string(k)] {
			del = append(del, nftables.SetElement{Key: k})
			w[string(k)] = true // once
		}
	}
	for _, k := range want {
		if !h[string(k)] {
			add = append(add, nftables.SetElement{Key: k})
			h[string(k)] = true
		}
	}
	return del, add
}

// verify compares the table in the kernel with layout: the sets' key
// sizes, the base chain's hook, and each chain's rules by their comments.
// A rule someone inserted has no comment of ours, so it shows too.
func verify(c *conn) error {
	if _, err := c.ListTableOfFamily(c.tb.Name, nftables.TableFamilyBridge); err != nil {
		if isNotExist(err) {
			return errors.New("table missing")
		}
		return fmt.Errorf("antispoof: looking up table bridge %s: %w", TableName, err)
	}
	have, err := c.GetSets(c.tb)
	if err != nil {
		return fmt.Errorf("antispoof: listing sets: %w", err)
	}
	var problems []string
	for _, want := range append(sets(c.tb), routers6Set(c.tb)) {
		i := slices.IndexFunc(have, func(s *nftables.Set) bool { return s.Name == want.Name })
		switch {
		case i < 0:
			problems = append(problems, "set "+want.Name+" missing")
		case have[i].KeyType.Bytes != want.KeyType.Bytes || have[i].IsMap || have[i].Interval:
			problems = append(problems, "set "+want.Name+" changed")
		}
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyBridge)
	if err != nil {
		return fmt.Errorf("antispoof: listing chains: %w", err)
	}
	for _, spec := range layout {
		i := slices.IndexFunc(chains, func(ch *nftables.Chain) bool { return ch.Table.Name == c.tb.Name && ch.Name == spec.name })
		if i < 0 {
			problems = append(problems, "chain "+spec.name+" missing")
			continue
		}
		if p := chainProblem(chains[i], chain(c.tb, spec.name)); p != "" {
			problems = append(problems, "chain "+spec.name+" "+p)
		}
		p, err := rulesProblem(c, c.tb, chains[i], spec.name, spec.rules)
		if err != nil {
			return err
		}
		if p != "" {
			problems = append(problems, "chain "+spec.name+" "+p)
		}
	}
	nd, err := verifyIngress(c)
	if err != nil {
		return err
	}
	problems = append(problems, nd...)
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// rulesProblem compares the rules of ch with spec by their comments
// (kind names the chain in them): a rule someone inserted has no comment
// of ours, so it shows too.
func rulesProblem(c *conn, tb *nftables.Table, ch *nftables.Chain, kind string, spec []rule) (string, error) {
	rules, err := c.GetRules(tb, ch)
	if err != nil {
		return "", fmt.Errorf("antispoof: listing rules of %s %s: %w", familyName(tb.Family), ch.Name, err)
	}
	var got, want []string
	for _, r := range rules {
		s, _ := userdata.GetString(r.UserData, userdata.TypeComment)
		got = append(got, s)
	}
	for _, r := range spec {
		s, _ := userdata.GetString(comment(kind, r.name), userdata.TypeComment)
		want = append(want, s)
	}
	if !slices.Equal(got, want) {
		return fmt.Sprintf("has rules %q, want %q", got, want), nil
	}
	return "", nil
}

// chainProblem compares a chain's hook with the one it should have.
func chainProblem(have, want *nftables.Chain) string {
	switch {
	case (have.Hooknum == nil) != (want.Hooknum == nil):
		return "hook changed"
	case want.Hooknum == nil:
		return ""
	case *have.Hooknum != *want.Hooknum || have.Priority == nil || *have.Priority != *want.Priority:
		return "hook or priority changed"
	case have.Policy == nil || *have.Policy != *want.Policy:
		return "policy changed"
	}
	return ""
}

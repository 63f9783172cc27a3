package antispoof

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/google/nftables"
	"github.com/google/nftables/userdata"
)

// Table is one of vmlane's tables in one network namespace.
type Table struct {
	// NetNS is the path of the network namespace; empty is the
	// caller's own.
	NetNS string
	// Name is the table's name (plugin.AntiSpoofTable names the table
	// of a bridge); empty is TableName.
	Name string
}

// conn is a netlink connection to a Table's namespace, and the table.
type conn struct {
	*nftables.Conn
	tb *nftables.Table
}

func (t Table) conn() (*conn, func(), error) {
	name := t.Name
	if name == "" {
		name = TableName
	}
	tb := &nftables.Table{Name: name, Family: nftables.TableFamilyBridge}
	if t.NetNS == "" {
		c, err := nftables.New()
		return &conn{c, tb}, func() {}, err
	}
	f, err := os.Open(t.NetNS)
	if err != nil {
		return nil, nil, fmt.Errorf("antispoof: %w", err)
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return &conn{c, tb}, func() { f.Close() }, nil
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
// rules added.
func queueEnsure(c *conn) error {
	c.AddTable(c.tb)
	for _, s := range sets(c.tb) {
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
	return nil
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
		var old []Port
		var exists bool
		if seen != nil {
			old, exists, seen = seen.Ports, seen.Exists, nil
		} else {
			var err error
			if old, exists, err = portsIn(c); err != nil {
				return err
			}
		}
		if !exists {
			if err := queueEnsure(c); err != nil {
				return err
			}
		}
		after := append(without(old, p.Name), p)
		if err := queueChange(c, old, after); err != nil {
			return err
		}
		return flush(c, "adding port "+p.String())
	})
}

// Remove removes every identity of the named ports, in one transaction.
// A port with none, or no table, is success.
func (t Table) Remove(names ...string) error {
	return t.retry(func(c *conn) error {
		old, _, err := portsIn(c)
		after := old
		for _, name := range names {
			after = without(after, name)
		}
		if err != nil || len(after) == len(old) {
			return err
		}
		if err := queueChange(c, old, after); err != nil {
			return err
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
	ports, exists, err := portsIn(c)
	return View{Ports: ports, Exists: exists}, err
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
		if err := verify(c); err != nil {
			ch.Repaired = err.Error()
			if err := queueEnsure(c); err != nil {
				return err
			}
		}
		have, _, err := portsIn(c)
		if err != nil {
			return err
		}
		after := append(slices.Clip(want), newer(have, listed)...)
		ch.Added, ch.Removed = diff(have, after)
		if ch.Repaired == "" && len(ch.Added)+len(ch.Removed) == 0 {
			return nil
		}
		if err := queueChange(c, have, after); err != nil {
			return err
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
	if _, err := c.ListTableOfFamily(c.tb.Name, nftables.TableFamilyBridge); err != nil {
		if isNotExist(err) || unsupported(err) {
			return nil
		}
		return fmt.Errorf("antispoof: looking up table bridge %s: %w", TableName, err)
	}
	c.DelTable(c.tb)
	return flush(c, "deleting table bridge "+c.tb.Name)
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

// portsIn reads the ports from the addrs set; a missing table or set has
// none, and exists false.
func portsIn(c *conn) (ports []Port, exists bool, err error) {
	s, err := c.GetSetByName(c.tb, setAddrs)
	if err != nil {
		if isNotExist(err) || unsupported(err) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("antispoof: reading set %s: %w", setAddrs, err)
	}
	elems, err := c.GetSetElements(s)
	if err != nil {
		return nil, true, fmt.Errorf("antispoof: reading set %s: %w", setAddrs, err)
	}
	keys := make([][]byte, len(elems))
	for i, e := range elems {
		keys[i] = e.Key
	}
	if ports, err = portsFromAddrs(keys); err != nil {
		return nil, true, err
	}
	// A table from before addrs6 counts as none: Add writes it whole
	// (Ensure keeps the elements), and Sync's verify repairs it.
	s6, err := c.GetSetByName(c.tb, setAddrs6)
	if err != nil {
		if isNotExist(err) {
			return ports, false, nil
		}
		return nil, true, fmt.Errorf("antispoof: reading set %s: %w", setAddrs6, err)
	}
	elems, err = c.GetSetElements(s6)
	if err != nil {
		return nil, true, fmt.Errorf("antispoof: reading set %s: %w", setAddrs6, err)
	}
	keys = keys[:0]
	for _, e := range elems {
		keys = append(keys, e.Key)
	}
	return ports, true, withAddrs6(ports, keys)
}

// queueChange adds to c's batch what turns the ports have into after:
// each set's elements that after lacks are deleted, the ones it adds are
// added. Elements two ports share (a port with two addresses has one name
// and one MAC) stay while any port needs them.
func queueChange(c *conn, have, after []Port) error {
	for i, s := range sets(c.tb) {
		del, add := elementDiff(keysOf(have, i), keysOf(after, i))
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
	for _, want := range sets(c.tb) {
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
		rules, err := c.GetRules(c.tb, chains[i])
		if err != nil {
			return fmt.Errorf("antispoof: listing rules of %s: %w", spec.name, err)
		}
		var got, want []string
		for _, r := range rules {
			s, _ := userdata.GetString(r.UserData, userdata.TypeComment)
			got = append(got, s)
		}
		for _, r := range spec.rules {
			s, _ := userdata.GetString(comment(spec.name, r.name), userdata.TypeComment)
			want = append(want, s)
		}
		if !slices.Equal(got, want) {
			problems = append(problems, fmt.Sprintf("chain %s has rules %q, want %q", spec.name, got, want))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
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

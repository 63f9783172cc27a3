package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/vmlane/vmlane/internal/antispoof"
	"github.com/vmlane/vmlane/leases"
	"github.com/vmlane/vmlane/plugin"
)

// `vmlanectl leases repair` rebuilds a damaged lease file from what is
// live on the node, so that allocation never restarts while pods still
// hold addresses (which moving the file aside would do):
//
//   - the CNI result cache of the runtime (libcni's, which containerd and
//     CRI-O keep in /var/lib/cni/results): each vmlane attachment's
//     container ID, interface, address, MAC, netns and pod;
//   - the links on the bridge: an attachment is restored only while its
//     host veth is there;
//   - the anti-spoofing table: the MAC and address each checked port may
//     use, which wins over the cache where they differ (it is what the
//     kernel enforces);
//   - what still parses of the damaged file: dynamic leases of VMs
//     attached without CNI, and bindings, which the cache does not hold.
//
// The decision is planRepair, a pure function; repair_linux.go reads the
// node.

// inFlight is how long after its reservation a CNI lease is kept though
// its host veth is not on the bridge: the plugin reserves the address
// before it makes the veth, so an ADD may be under way; the kubelet gives a
// runtime call two minutes.
const inFlight = 2 * time.Minute

// nodeState is what repair reads from the kernel.
type nodeState struct {
	// ports are the links on the bridge.
	ports map[string]bool
	// guarded are the anti-spoofing table's entries, by port.
	guarded map[string]antispoof.Port
}

// repairPlan is the rebuilt file and what repair says about it.
type repairPlan struct {
	leases []leases.Lease
	// restored says where each lease came from, by IP.
	restored map[netip.Addr]string
	// notes are what repair did not restore, and disagreements.
	notes []string
}

// planRepair decides the rebuilt file of leaseFile (subnet, and subnet6 on
// a dual-stack node, zero otherwise) from the cache, the node and what was
// salvaged of the damaged file. leaseFile and the cache entries' lease
// files must be canonical (canonicalPath): they are compared as strings.
func planRepair(leaseFile string, subnet, subnet6 netip.Prefix, cache []cacheEntry, node nodeState, salvaged []leases.Lease, now time.Time) repairPlan {
	plan := repairPlan{restored: map[netip.Addr]string{}}
	ips, macs, keys := map[netip.Addr]bool{}, map[string]bool{}, map[leases.Key]bool{}
	add := func(l leases.Lease, from string) bool {
		if l.IP6.IsValid() && !subnet6.Contains(l.IP6) {
			plan.notes = append(plan.notes, fmt.Sprintf("%s (%s): IPv6 %s dropped: it is outside the node's IPv6 subnet %v", describe(l), from, l.IP6, subnet6))
			l.IP6, l.State6, l.Expires6 = netip.Addr{}, "", time.Time{}
		}
		switch {
		case !subnet.Contains(l.IP):
			plan.notes = append(plan.notes, fmt.Sprintf("not restored: %s (%s): %s is outside subnet %s", describe(l), from, l.IP, subnet))
		case ips[l.IP]:
			plan.notes = append(plan.notes, fmt.Sprintf("not restored: %s (%s): %s is already restored for another", describe(l), from, l.IP))
		case l.IP6.IsValid() && ips[l.IP6]:
			plan.notes = append(plan.notes, fmt.Sprintf("not restored: %s (%s): %s is already restored for another", describe(l), from, l.IP6))
		case l.MAC != "" && macs[l.MAC]:
			plan.notes = append(plan.notes, fmt.Sprintf("not restored: %s (%s): MAC %s is already restored for another", describe(l), from, l.MAC))
		case l.ContainerID != "" && keys[l.Key()]:
			// The cache's (confirmed by the bridge) came first.
			plan.notes = append(plan.notes, fmt.Sprintf("not restored: %s (%s): attachment %s already has its lease", describe(l), from, l.Key()))
		default:
			ips[l.IP], macs[l.MAC] = true, true
			if l.ContainerID != "" {
				keys[l.Key()] = true
			}
			if l.IP6.IsValid() {
				ips[l.IP6] = true
			}
			plan.leases = append(plan.leases, l)
			plan.restored[l.IP] = from
			return true
		}
		return false
	}
	byKey := map[leases.Key]leases.Lease{}
	for _, l := range salvaged {
		if l.Source == leases.SourceCNI && l.ContainerID != "" {
			byKey[l.Key()] = l
		}
	}
	done := map[leases.Key]bool{}
	slices.SortFunc(cache, func(a, b cacheEntry) int { return a.ip.Compare(b.ip) })
	for _, e := range cache {
		switch {
		case e.leaseFile != leaseFile:
			plan.notes = append(plan.notes, fmt.Sprintf("left out: CNI cache entry %s (attachment %s, network %q): its lease file is %s, not %s", e.file, e.key, e.networkName, e.leaseFile, leaseFile))
			continue
		case e.subnet != subnet:
			plan.notes = append(plan.notes, fmt.Sprintf("left out: CNI cache entry %s (attachment %s, network %q): its subnet %s is not the node's %s (an old podCIDR's)", e.file, e.key, e.networkName, e.subnet, subnet))
			continue
		}
		port := plugin.HostVethName(e.key)
		if !node.ports[port] {
			plan.notes = append(plan.notes, fmt.Sprintf("not restored: attachment %s (%s): its host veth %s is not on the bridge (the pod is gone; the runtime's GC removes %s)", e.key, e.pod.Namespace+"/"+e.pod.Name, port, e.file))
			continue
		}
		l := leases.Lease{
			MAC: e.mac, IP: e.ip, IP6: e.ip6, State: leases.StateReserved, Source: leases.SourceCNI,
			ContainerID: e.key.ContainerID, IfName: e.key.IfName, NetNS: e.netns, VM: e.vm,
			Pod: e.pod, Hostname: e.pod.Name, Created: now,
		}
		if g, ok := node.guarded[port]; ok {
			l.BridgePort = port
			if g.IP != l.IP || g.MAC.String() != l.MAC {
				plan.notes = append(plan.notes, fmt.Sprintf("attachment %s: the CNI cache says %s %s, anti-spoofing lets port %s use %s %s; restored the latter (what the kernel enforces)", e.key, l.MAC, l.IP, port, g.MAC, g.IP))
				l.MAC, l.IP = g.MAC.String(), g.IP
			}
			if g.IP6.IsValid() && g.IP6 != l.IP6 {
				plan.notes = append(plan.notes, fmt.Sprintf("attachment %s: the CNI cache says IPv6 %v, anti-spoofing lets port %s use %s; restored the latter", e.key, l.IP6, port, g.IP6))
				l.IP6 = g.IP6
			}
		} else if e.antiSpoof {
			l.BridgePort = port // vmlaned puts the port back in the table
		}
		// The damaged file's binding of the same lease is kept.
		if old, ok := byKey[e.key]; ok && old.IP == l.IP && old.MAC == l.MAC && old.State == leases.StateBound && !old.Expired(now) {
			l.State, l.Expires, l.Hostname, l.Created = old.State, old.Expires, old.Hostname, old.Created
		}
		if old, ok := byKey[e.key]; ok && old.IP6 == l.IP6 && l.IP6.IsValid() && old.State6 == leases.StateBound && now.Before(old.Expires6) {
			l.State6, l.Expires6 = old.State6, old.Expires6
		}
		if add(l, "CNI cache, port "+port) {
			done[e.key] = true
		}
	}
	for _, l := range salvaged {
		switch {
		case !l.Known():
			// A newer vmlane's: kept as it was, members and all, so its
			// address stays held and that vmlane finds it again.
			add(l, fmt.Sprintf("damaged file, state %q source %q: a newer vmlane's, kept held", l.State, l.Source))
		case l.Source == leases.SourceCNI && done[l.Key()]:
			if plan.restored[l.IP] == "" {
				plan.notes = append(plan.notes, fmt.Sprintf("not restored: %s from the damaged file: attachment %s already has its lease, from the CNI cache", describe(l), l.Key()))
			}
		case l.Source == leases.SourceCNI:
			port := l.BridgePort
			if port == "" {
				port = plugin.HostVethName(l.Key())
			}
			switch {
			case node.ports[port]:
				add(l, "damaged file, port "+port+" live")
			case !l.Created.IsZero() && now.Sub(l.Created) < inFlight:
				// An ADD reserves the address before it makes the veth:
				// one may be under way (repair --force on a live file).
				add(l, "damaged file, reserved "+now.Sub(l.Created).Round(time.Second).String()+" ago: an ADD may be under way, kept (DEL or GC frees it if the pod never comes)")
			default:
				plan.notes = append(plan.notes, fmt.Sprintf("not restored: %s from the damaged file: its host veth %s is not on the bridge", describe(l), port))
			}
		case l.Expired(now):
			plan.notes = append(plan.notes, fmt.Sprintf("not restored: %s from the damaged file: expired", describe(l)))
		default:
			add(l, "damaged file")
		}
	}
	// A checked port whose address no restored lease holds: in use, but
	// nothing says by which attachment.
	for _, port := range sortedKeys(node.guarded) {
		g := node.guarded[port]
		if node.ports[port] && g.IP6.IsValid() && !ips[g.IP6] && ips[g.IP] {
			plan.notes = append(plan.notes, fmt.Sprintf("WARNING: port %s uses IPv6 %s, which no restored lease holds: allocation may give it to another", port, g.IP6))
		}
		if node.ports[port] && !ips[g.IP] {
			plan.notes = append(plan.notes, fmt.Sprintf("WARNING: port %s uses %s %s, and neither the CNI cache nor the damaged file names its attachment: the address is NOT held; delete that pod, or allocation may give its address to another", port, g.MAC, g.IP))
		}
	}
	slices.SortFunc(plan.leases, func(a, b leases.Lease) int { return a.IP.Compare(b.IP) })
	return plan
}

func describe(l leases.Lease) string {
	s := l.IP.String() + " " + l.MAC
	if l.ContainerID != "" {
		s += " attachment " + l.Key().String()
	}
	if l.Pod.Name != "" {
		s += " pod " + l.Pod.Namespace + "/" + l.Pod.Name
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// printPlan writes what repair restored and what it did not.
func printPlan(w io.Writer, plan repairPlan) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "IP\tMAC\tSTATE\tATTACHMENT\tPOD\tFROM")
	for _, l := range plan.leases {
		att := ""
		if l.ContainerID != "" {
			att = l.Key().String()
		}
		pod := ""
		if l.Pod.Name != "" {
			pod = l.Pod.Namespace + "/" + l.Pod.Name
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", l.IP, l.MAC, l.State, att, pod, plan.restored[l.IP])
	}
	tw.Flush()
	for _, n := range plan.notes {
		fmt.Fprintln(w, n)
	}
}

// subnetOf picks the subnet and gateway of the rebuilt file: the flag,
// else the vmlane networks of the cache that use this lease file (they
// must agree), else the damaged file's header.
func subnetOf(flagSubnet string, leaseFile string, cache []cacheEntry, header leases.File) (netip.Prefix, netip.Addr, error) {
	if flagSubnet != "" {
		p, err := netip.ParsePrefix(flagSubnet)
		if err != nil || p != p.Masked() {
			return netip.Prefix{}, netip.Addr{}, usagef("invalid value %q for flag --subnet: want the node's pod CIDR, e.g. 10.244.3.0/24", flagSubnet)
		}
		for _, e := range cache {
			if e.leaseFile == leaseFile && e.subnet == p {
				return p, e.gateway, nil
			}
		}
		return p, p.Addr().Next(), nil
	}
	var seen []string
	var p netip.Prefix
	var gw netip.Addr
	for _, e := range cache {
		if e.leaseFile != leaseFile {
			continue
		}
		if !slices.Contains(seen, e.subnet.String()) {
			seen = append(seen, e.subnet.String())
		}
		p, gw = e.subnet, e.gateway
	}
	switch {
	case len(seen) == 1:
		return p, gw, nil
	case len(seen) > 1:
		return netip.Prefix{}, netip.Addr{}, fmt.Errorf("the CNI cache holds attachments of several subnets (%s): say which is the node's with --subnet", strings.Join(seen, ", "))
	case header.Subnet.IsValid():
		gw := header.Gateway
		if !gw.IsValid() {
			gw = header.Subnet.Addr().Next()
		}
		return header.Subnet, gw, nil
	}
	return netip.Prefix{}, netip.Addr{}, errors.New("no subnet: neither the CNI cache nor the damaged file names one; give the node's pod CIDR with --subnet")
}

// subnet6Of picks the IPv6 subnet and gateway of the rebuilt file, on a
// dual-stack node: the networks of the cache on this lease file and
// subnet, else the damaged file's header; zero when neither has one (an
// IPv4-only node).
func subnet6Of(leaseFile string, subnet netip.Prefix, cache []cacheEntry, header leases.File) (netip.Prefix, netip.Addr) {
	for _, e := range cache {
		if e.leaseFile == leaseFile && e.subnet == subnet && e.subnet6.IsValid() {
			return e.subnet6, e.gateway6
		}
	}
	if header.Subnet6.IsValid() {
		gw := header.Gateway6
		if !gw.IsValid() {
			gw = header.Subnet6.Addr().Next()
		}
		return header.Subnet6, gw
	}
	return netip.Prefix{}, netip.Addr{}
}

// freeName is name, or name-2, name-3, ... if it is taken: two repairs in
// one second (or a repair that planned again) keep both damaged files.
func freeName(name string) string {
	for i := 1; ; i++ {
		n := name
		if i > 1 {
			n = fmt.Sprintf("%s-%d", name, i)
		}
		// Any error but "exists" ends the search: the link itself then
		// says what is wrong, rather than this loop going on for ever.
		if _, err := os.Lstat(n); err != nil {
			return n
		}
	}
}

// leasesRepair is `vmlanectl leases repair`. It plans from one read of
// the lease file and writes only while the file still holds what it read
// (leases.Store.Replace); when a writer (an ADD, a DHCP bind) committed in
// between, it reads and plans again, a few times.
func (c *cli) leasesRepair(o *leasesOpts) error {
	file := canonicalPath(o.file)
	const tries = 5
	for try := 1; ; try++ {
		err := c.repairOnce(o, file)
		if !errors.Is(err, leases.ErrChanged) {
			return err
		}
		if try == tries {
			return fmt.Errorf("%w: it kept changing while repair planned (%d tries); stop what writes it (vmlaned) and run repair again", err, tries)
		}
		fmt.Fprintf(c.stderr, "the lease file changed while repair planned (%v): planning again\n", err)
	}
}

// repairOnce is one read, plan and write of leasesRepair.
func (c *cli) repairOnce(o *leasesOpts, file string) error {
	data, err := os.ReadFile(o.file)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("reading %s: %w", o.file, err)
	}
	if err == nil && !o.force {
		if _, rerr := leases.Read(o.file); rerr == nil {
			return fmt.Errorf("lease file %s reads fine: repair rewrites it only with --force", o.file)
		}
	}
	sv := leases.Salvage(data)
	header := sv.Header
	if header.Version > leases.Version {
		return fmt.Errorf("lease file %s is format version %d, which a newer vmlane wrote; this vmlanectl writes version %d and would drop what it does not know: repair it with the vmlanectl of the vmlane that wrote it", o.file, header.Version, leases.Version)
	}
	cache, problems, err := readCNICache(o.cniCache)
	if err != nil {
		return err
	}
	for i := range cache {
		cache[i].leaseFile = canonicalPath(cache[i].leaseFile)
	}
	for _, p := range problems {
		fmt.Fprintln(c.stderr, "CNI cache:", p)
	}
	subnet, gw, err := subnetOf(o.subnet, file, cache, header)
	if err != nil {
		return err
	}
	subnet6, gw6 := subnet6Of(file, subnet, cache, header)
	node, err := readNode(o.bridge)
	if err != nil {
		return err
	}
	now := time.Now().UTC().Truncate(time.Second)
	plan := planRepair(file, subnet, subnet6, cache, node, sv.Leases, now)
	for _, l := range sv.Lost {
		plan.notes = append(plan.notes, "WARNING: the damaged file's "+l+" looks like a lease but does not parse (a torn write): if its address is in use, nothing holds it now")
	}
	rebuilt := &leases.File{Leases: plan.leases, Unknown: header.Unknown}
	// The allocation cursors go on where they were, so that an address
	// released just before the damage is not handed out at once.
	if subnet.Contains(header.LastReserved) {
		rebuilt.LastReserved = header.LastReserved
	} else {
		plan.notes = append(plan.notes, "the damaged file's allocation cursor is lost: allocation starts again at the subnet's first free address")
	}
	if subnet6.IsValid() && subnet6.Contains(header.LastReserved6) {
		rebuilt.LastReserved6 = header.LastReserved6
	}
	printPlan(c.stdout, plan)
	if o.dryRun {
		fmt.Fprintf(c.stdout, "dry run: %s not written (%d leases in subnet %s)\n", o.file, len(plan.leases), subnet)
		return nil
	}
	opts := []leases.Option{leases.WithNode(header.Node)}
	if subnet6.IsValid() {
		opts = append(opts, leases.WithSubnet6(subnet6, gw6))
	}
	store, err := leases.Open(o.file, subnet, gw, opts...)
	if err != nil {
		return fmt.Errorf("lease file %s, subnet %s, gateway %s: %w", o.file, subnet, gw, err)
	}
	keep := ""
	if data != nil {
		keep = freeName(o.file + ".damaged-" + now.Format("20060102T150405Z"))
	}
	if err := store.Replace(rebuilt, keep, data); err != nil {
		return err
	}
	if keep != "" {
		fmt.Fprintf(c.stdout, "wrote %s (%d leases in subnet %s); the damaged file is %s\n", o.file, len(plan.leases), subnet, keep)
	} else {
		fmt.Fprintf(c.stdout, "wrote %s (%d leases in subnet %s)\n", o.file, len(plan.leases), subnet)
	}
	return nil
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"time"

	"github.com/vmlane/vmlane/internal/atomicfile"
	"github.com/vmlane/vmlane/leases"
	"github.com/vmlane/vmlane/plugin"
)

// leasesOpts holds the flags of every leases command. They share one flag
// set so that flags may come before the command word too; each command then
// checks it was given only flags it takes (leasesFlags).
type leasesOpts struct {
	file    string
	output  outputFlag
	mac     macFlag
	ip      ipFlag
	timeout time.Duration
	cocoon  string
	// repair's
	bridge, cniCache, subnet string
	dryRun, force            bool
}

// leasesFlags lists, for each leases command, the flags it takes.
var leasesFlags = map[string][]string{
	"list":   {"lease-file", "o"},
	"get":    {"lease-file", "o", "mac", "ip"},
	"wait":   {"lease-file", "o", "mac", "timeout"},
	"export": {"lease-file", "cocoon"},
	"repair": {"lease-file", "bridge", "cni-cache-dir", "subnet", "dry-run", "force"},
}

// defaultWaitTimeout bounds wait unless --timeout says otherwise: long enough
// for a VM to boot and ask for DHCP, short enough that a script whose VM
// never will does not hang.
const defaultWaitTimeout = time.Minute

func (c *cli) runLeases(args []string) int {
	o := leasesOpts{output: outputTable}
	fset := flag.NewFlagSet("vmlanectl leases", flag.ContinueOnError)
	// Errors and usage are printed by fail and run, in one format.
	fset.SetOutput(io.Discard)
	fset.Usage = func() {}
	fset.StringVar(&o.file, "lease-file", leases.NodePath, "")
	fset.Var(&o.output, "o", "")
	fset.Var(&o.mac, "mac", "")
	fset.Var(&o.ip, "ip", "")
	fset.DurationVar(&o.timeout, "timeout", defaultWaitTimeout, "")
	fset.StringVar(&o.cocoon, "cocoon", "", "")
	fset.StringVar(&o.bridge, "bridge", plugin.DefaultBridge, "")
	fset.StringVar(&o.cniCache, "cni-cache-dir", cniCacheDir, "")
	fset.StringVar(&o.subnet, "subnet", "", "")
	fset.BoolVar(&o.dryRun, "dry-run", false, "")
	fset.BoolVar(&o.force, "force", false, "")

	words, err := parseInterspersed(fset, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(c.stderr, usage())
		return exitOK
	case err != nil:
		return c.fail("vmlanectl leases", &usageError{msg: err.Error()})
	case len(words) == 0:
		return c.fail("vmlanectl leases", usagef("missing command: list, get, wait, export or repair"))
	case words[0] == "help":
		fmt.Fprint(c.stderr, usage())
		return exitOK
	}
	verb := words[0]
	allowed, ok := leasesFlags[verb]
	if !ok {
		return c.fail("vmlanectl leases", usagef("unknown command %q: the commands are: list, get, wait, export, repair", verb))
	}
	prefix := "vmlanectl leases " + verb
	if len(words) > 1 {
		return c.fail(prefix, usagef("unexpected argument %q", words[1]))
	}
	var stray []string
	fset.Visit(func(f *flag.Flag) {
		if !slices.Contains(allowed, f.Name) {
			stray = append(stray, flagName(f.Name))
		}
	})
	if len(stray) > 0 {
		return c.fail(prefix, usagef("flag %s does not apply to %s", stray[0], verb))
	}
	if o.file == "" {
		return c.fail(prefix, usagef("invalid value \"\" for flag --lease-file: want a file name"))
	}

	switch verb {
	case "list":
		err = c.leasesList(&o)
	case "get":
		err = c.leasesGet(&o)
	case "wait":
		err = c.leasesWait(&o)
	case "export":
		err = c.leasesExport(&o)
	case "repair":
		err = c.leasesRepair(&o)
	}
	if err != nil {
		return c.fail(prefix, err)
	}
	return exitOK
}

// flagName spells a flag the way the usage does.
func flagName(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// readLeases reads the lease file, turning a missing one into an error an
// operator can act on (the bare one is "open ...: no such file or directory").
// Other errors already name the file.
func readLeases(path string) (*leases.Snapshot, error) {
	s, err := leases.Read(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("lease file %s does not exist (is this a vmlane node? --lease-file reads another file)", path)
	}
	return s, err
}

func (c *cli) leasesList(o *leasesOpts) error {
	s, err := readLeases(o.file)
	if err != nil {
		return err
	}
	ls := sortByIP(s.Leases())
	if len(ls) == 0 && o.output == outputTable {
		// A bare header reads like a broken command; say so instead.
		fmt.Fprintf(c.stderr, "no leases in %s\n", o.file)
		return nil
	}
	return printLeases(c.stdout, o.output, ls, c.now())
}

func (c *cli) leasesGet(o *leasesOpts) error {
	hasMAC, hasIP := o.mac.mac != "", o.ip.ip.IsValid()
	switch {
	case !hasMAC && !hasIP:
		return usagef("missing --mac or --ip: get needs one")
	case hasMAC && hasIP:
		return usagef("--mac and --ip given: get takes one")
	}
	s, err := readLeases(o.file)
	if err != nil {
		return err
	}
	var (
		l  leases.Lease
		ok bool
	)
	if hasMAC {
		if l, ok = s.ByMAC(o.mac.mac); !ok {
			return fmt.Errorf("no lease for MAC %s in %s%s", o.mac.mac, o.file, staleNote(s, o.mac.mac))
		}
	} else if l, ok = s.ByIP(o.ip.ip); !ok {
		return fmt.Errorf("no lease for IP %s in %s", o.ip.ip, o.file)
	}
	return printLease(c.stdout, o.output, l, c.now())
}

// staleNote explains a MAC that ByMAC does not find although the file lists
// it: its lease expired (and nobody has removed it yet), its address was
// declined, or a newer vmlane wrote the lease in a state or with a source
// this version does not know. The operator asking would otherwise think the
// VM never got one.
func staleNote(s *leases.Snapshot, mac string) string {
	var stale *leases.Lease
	for _, l := range s.Leases() {
		if l.MAC != mac {
			continue
		}
		if l.State != leases.StateDeclined {
			stale = &l
			break
		}
		if stale == nil {
			stale = &l
		}
	}
	if stale == nil {
		return ""
	}
	until := "-"
	if !stale.Expires.IsZero() {
		until = stale.Expires.UTC().Format(time.RFC3339)
	}
	switch {
	case !stale.Known():
		return fmt.Sprintf(" (its lease for %s has state %q and source %q, which this vmlanectl does not know: a newer vmlane wrote it)", stale.IP, stale.State, stale.Source)
	case stale.State == leases.StateDeclined:
		return fmt.Sprintf(" (%s was declined and is quarantined until %s)", stale.IP, until)
	default:
		return fmt.Sprintf(" (its lease for %s expired at %s)", stale.IP, until)
	}
}

func (c *cli) leasesWait(o *leasesOpts) error {
	if o.mac.mac == "" {
		return usagef("missing --mac: wait needs the MAC to wait for")
	}
	if o.timeout < 0 {
		return usagef("invalid value %q for flag --timeout: must not be negative", o.timeout)
	}
	ctx := context.Background()
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	l, err := leases.Wait(ctx, o.file, o.mac.mac)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("timed out after %s waiting for a bound lease of MAC %s: %s", o.timeout, o.mac.mac, waitState(o.file, o.mac.mac))
		}
		return err
	}
	return printLease(c.stdout, o.output, l, c.now())
}

// waitState says, after wait gave up, how far the MAC got, so the operator
// knows whether to look at the VM (never asked for DHCP) or at the node.
func waitState(path, mac string) string {
	s, err := leases.Read(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("lease file %s does not exist", path)
	case err != nil:
		return err.Error()
	}
	if l, ok := s.ByMAC(mac); ok {
		return fmt.Sprintf("its lease for %s in %s is %s", l.IP, path, l.State)
	}
	return fmt.Sprintf("%s holds no live lease for it%s", path, staleNote(s, mac))
}

func (c *cli) leasesExport(o *leasesOpts) error {
	if o.cocoon == "" {
		return usagef("missing --cocoon: export needs the file to write")
	}
	s, err := readLeases(o.file)
	if err != nil {
		return err
	}
	if err := writeCocoonCompat(s, o.cocoon); err != nil {
		return fmt.Errorf("writing cocoon-net export: %w", err)
	}
	return nil
}

// writeCocoonCompat writes s.Compat() to path as a JSON array of
// {"mac","ip","expiry"} (RFC 3339), atomically, for runtimes that already
// read cocoon-net's lease export. It lives here, not in leases: runtimes
// that import leases read the lease file itself.
func writeCocoonCompat(s *leases.Snapshot, path string) error {
	data, err := json.MarshalIndent(s.Compat(), "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(data, '\n'), 0o644)
}

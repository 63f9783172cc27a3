package main

// vmlanectl claims: the VMs whose addresses the node holds (pods annotated
// vmlane.io/vm), and giving a gone VM's addresses back.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"text/tabwriter"

	"github.com/vmlane/vmlane/leases"
)

func (c *cli) runClaims(args []string) int {
	o := leasesOpts{output: outputTable}
	fset := flag.NewFlagSet("vmlanectl claims", flag.ContinueOnError)
	fset.SetOutput(io.Discard)
	fset.Usage = func() {}
	fset.StringVar(&o.file, "lease-file", leases.DefaultPath, "")
	fset.Var(&o.output, "o", "")
	words, err := parseInterspersed(fset, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(c.stderr, usage())
		return exitOK
	case err != nil:
		return c.fail("vmlanectl claims", &usageError{msg: err.Error()})
	case len(words) == 0:
		return c.fail("vmlanectl claims", usagef("missing command: list or release"))
	case o.file == "":
		return c.fail("vmlanectl claims", usagef("invalid value \"\" for flag --lease-file: want a file name"))
	}
	switch verb := words[0]; verb {
	case "list":
		if len(words) > 1 {
			return c.fail("vmlanectl claims list", usagef("unexpected argument %q", words[1]))
		}
		err = c.claimsList(&o)
	case "release":
		if len(words) != 2 {
			return c.fail("vmlanectl claims release", usagef("want one VM, NAMESPACE/NAME"))
		}
		if o.output != outputTable {
			return c.fail("vmlanectl claims release", usagef("flag -o does not apply to release"))
		}
		err = c.claimsRelease(o.file, words[1])
	default:
		return c.fail("vmlanectl claims", usagef("unknown command %q: the commands are: list, release", verb))
	}
	if err != nil {
		return c.fail("vmlanectl claims "+words[0], err)
	}
	return exitOK
}

func (c *cli) claimsList(o *leasesOpts) error {
	s, err := readLeases(o.file)
	if err != nil {
		return err
	}
	var vms []leases.Lease
	for _, l := range sortByIP(s.Leases()) {
		if l.VMName != "" {
			vms = append(vms, l)
		}
	}
	if o.output == outputJSON {
		if vms == nil {
			vms = []leases.Lease{}
		}
		return writeJSON(c.stdout, vms)
	}
	if len(vms) == 0 {
		fmt.Fprintf(c.stderr, "no VM holds addresses in %s\n", o.file)
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "VM\tIP\tIP6\tMAC\tSTATE\tPOD\tHELD UNTIL")
	now := c.now()
	for _, l := range vms {
		state, pod, until := "attached", l.Pod.Namespace+"/"+l.Pod.Name, "-"
		if l.State == leases.StateHeld {
			state, until = "held", expires(l, now)
		}
		ip6 := ""
		if l.IP6.IsValid() {
			ip6 = l.IP6.String()
		}
		fmt.Fprintln(tw, strings.Join([]string{orDash(l.VMName), orDash(ipString(l)), orDash(ip6), orDash(l.MAC), state, orDash(strings.Trim(pod, "/")), until}, "\t"))
	}
	return tw.Flush()
}

// claimsRelease frees the addresses held for a VM whose pod went, in the
// subnets the file itself records.
func (c *cli) claimsRelease(path, vm string) error {
	name, err := leases.ParseVMName(vm)
	if err != nil {
		return &usageError{msg: err.Error()}
	}
	store, err := leases.OpenRecorded(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("lease file %s does not exist: no VM holds addresses here", path)
	}
	if err != nil {
		return err
	}
	var l leases.Lease
	var ok bool
	if err := store.Update(func(tx *leases.Tx) (err error) {
		l, ok, err = tx.ReleaseVM(name)
		return err
	}); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("VM %s holds no address in %s", name, path)
	}
	ip6 := ""
	if l.IP6.IsValid() {
		ip6 = " " + l.IP6.String()
	}
	fmt.Fprintf(c.stdout, "released VM %s: %s%s %s\n", name, l.IP, ip6, l.MAC)
	return nil
}

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/vmlane/vmlane/internal/command"
	"github.com/vmlane/vmlane/pf"
	"github.com/vmlane/vmlane/routes"
)

// teardown on a macOS node removes what vmlaned did, as its state files
// under /var/db/vmlane record it, and nothing else: the routes it added
// (routes.json), the rules in its pf anchor and its pf enable reference
// (pf.json; pf stays enabled if anyone else holds a reference, and the
// main ruleset is never touched), and its vmnet configuration (vmnet.json):
// the plist's Shared_Net_Address and Shared_Net_Mask get back the values
// they had before vmlane (unless someone has changed them since), bootpd's
// plist its dhcp_ignore_client_identifier on the same terms, and the
// network description for macOS 26 is removed. vmnet picks the restored
// plist up when its shared network next starts. --cni-conf-dir and
// --bridge are Linux flags and mean nothing here; bootpd's leases are
// vmnet's and stay.
func teardown(w io.Writer, o teardownOpts) error {
	if o.dryRun {
		fmt.Fprintf(w, "would remove: the routes listed in %s, the rules of the pf anchor named in %s (default %s) and vmlane's pf enable reference, "+
			"and vmlane's vmnet changes recorded in %s (restoring vmnet's plist values and bootpd's dhcp_ignore_client_identifier, removing the network description)\n",
			routes.DefaultBSDStatePath, pf.DefaultStatePath, pf.DefaultAnchor, pf.DefaultVmnetStatePath)
		return nil
	}
	var errs []error
	table, err := routes.NewBSDTable(routes.DefaultBSDStatePath, o.protocol)
	if err != nil {
		// Without the record there is no telling vmlane's routes from
		// anyone else's: remove none.
		errs = append(errs, fmt.Errorf("not removing routes: %w", err))
	} else {
		removed, err := routes.Teardown(table, nil, o.protocol)
		errs = append(errs, err)
		for _, r := range removed {
			fmt.Fprintf(w, "removed route %s via %s\n", r.Dst, r.Via)
		}
	}
	done, err := pf.Teardown(command.Exec{}, pf.DefaultStatePath)
	errs = append(errs, err)
	for _, d := range done {
		fmt.Fprintln(w, d)
	}
	done, err = pf.RestoreVmnet(pf.DefaultVmnetStatePath)
	errs = append(errs, err)
	for _, d := range done {
		fmt.Fprintln(w, d)
	}
	// The state folder goes too once nothing is left in it.
	if err := errors.Join(errs...); err != nil {
		return err
	}
	os.Remove(filepath.Dir(routes.DefaultBSDStatePath))
	return nil
}

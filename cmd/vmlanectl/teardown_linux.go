package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/vmlane/vmlane/internal/antispoof"
	"github.com/vmlane/vmlane/internal/bridge"
	"github.com/vmlane/vmlane/plugin"
	"github.com/vmlane/vmlane/routes"
)

// teardown removes everything vmlane installed on this node, and nothing
// else: routes with vmlane's protocol, vmlane's iptables chains and jumps,
// the conflists vmlaned wrote, the anti-spoofing table, and the bridge (which takes the host ends of
// any remaining pod veths with it). Leases are kept: they are the record
// of which pod had which address.
func teardown(w io.Writer, o teardownOpts) error {
	if o.dryRun {
		fmt.Fprintf(w, "would remove: routes with protocol %d, iptables chains %s and %s with their jumps, %s, %s, nftables tables bridge %s and bridge %s, bridge %s\n",
			o.protocol, routes.ChainNAT, routes.ChainForward, filepath.Join(o.cniConfDir, plugin.ConflistName),
			filepath.Join(o.vmCNIConfDir, plugin.VMConflistName), plugin.AntiSpoofTable(o.bridge), bridge.AwayTable, o.bridge)
		return nil
	}
	var errs []error
	var ipts []routes.IPTables
	for _, v6 := range []bool{false, true} {
		ipt, err := routes.NewIPTables(v6)
		if err != nil {
			if !v6 {
				errs = append(errs, err)
			}
			continue
		}
		ipts = append(ipts, ipt)
	}
	removed, err := routes.Teardown(routes.NewKernelTable(), ipts, o.protocol)
	errs = append(errs, err)
	for _, r := range removed {
		fmt.Fprintf(w, "removed route %s\n", r)
	}
	fmt.Fprintf(w, "removed iptables chains %s and %s\n", routes.ChainNAT, routes.ChainForward)
	if had, err := routes.RemoveVXLAN(""); err != nil {
		errs = append(errs, err)
	} else if had {
		fmt.Fprintf(w, "removed VXLAN device %s\n", routes.DefaultVXLANDevice)
	}
	for _, p := range []string{filepath.Join(o.cniConfDir, plugin.ConflistName), filepath.Join(o.vmCNIConfDir, plugin.VMConflistName)} {
		err := os.Remove(p)
		switch {
		case err == nil:
			fmt.Fprintf(w, "removed %s\n", p)
		case !errors.Is(err, fs.ErrNotExist):
			errs = append(errs, err)
		}
	}
	if err := (antispoof.Table{Name: plugin.AntiSpoofTable(o.bridge)}).Delete(); err != nil {
		errs = append(errs, err)
	} else {
		fmt.Fprintf(w, "removed nftables table bridge %s (if it existed)\n", plugin.AntiSpoofTable(o.bridge))
	}
	if err := bridge.DeleteAway(); err != nil {
		errs = append(errs, err)
	} else {
		fmt.Fprintf(w, "removed nftables table bridge %s (if it existed)\n", bridge.AwayTable)
	}
	if err := bridge.Delete(o.bridge); err != nil {
		errs = append(errs, fmt.Errorf("deleting bridge %s: %w", o.bridge, err))
	} else {
		fmt.Fprintf(w, "removed bridge %s (if it existed)\n", o.bridge)
	}
	return errors.Join(errs...)
}

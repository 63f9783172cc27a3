package main

import (
	"flag"
	"io"

	"github.com/vmlane/vmlane/plugin"
	"github.com/vmlane/vmlane/routes"
)

// teardownOpts are the flags of `vmlanectl teardown`; they must match the
// daemon's.
type teardownOpts struct {
	protocol   int
	cniConfDir string
	// vmCNIConfDir is vmlaned's --vm-cni-conf-dir (cniConfDir if empty).
	vmCNIConfDir string
	bridge       string
	dryRun       bool
}

func (c *cli) runTeardown(args []string) int {
	o := teardownOpts{}
	fs := flag.NewFlagSet("vmlanectl teardown", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.IntVar(&o.protocol, "route-protocol", routes.DefaultProtocol, "")
	fs.StringVar(&o.cniConfDir, "cni-conf-dir", plugin.DefaultConfDir, "")
	fs.StringVar(&o.vmCNIConfDir, "vm-cni-conf-dir", "", "")
	fs.StringVar(&o.bridge, "bridge", plugin.DefaultBridge, "")
	fs.BoolVar(&o.dryRun, "dry-run", false, "")
	if err := fs.Parse(args); err != nil {
		return c.fail("vmlanectl teardown", usagef("%v", err))
	}
	if fs.NArg() > 0 {
		return c.fail("vmlanectl teardown", usagef("unexpected argument %q", fs.Arg(0)))
	}
	if o.vmCNIConfDir == "" {
		o.vmCNIConfDir = o.cniConfDir
	}
	if o.protocol < 5 || o.protocol > 255 {
		return c.fail("vmlanectl teardown", usagef("invalid --route-protocol %d: want 5-255", o.protocol))
	}
	if err := teardown(c.stdout, o); err != nil {
		return c.fail("vmlanectl teardown", err)
	}
	return exitOK
}

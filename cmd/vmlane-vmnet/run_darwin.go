package main

import (
	"context"
	"log/slog"

	"github.com/vmlane/vmlane/pf"
	"github.com/vmlane/vmlane/pf/vmnet"
)

// serve holds the network with the real vmnet and answers on the Mach
// service until ctx ends.
func serve(ctx context.Context, c config, pol vmnet.Policy, log *slog.Logger) error {
	api, err := vmnet.OpenAPI()
	if err != nil {
		return err
	}
	d := newConfigured(c, pol, api, log)
	d.ifaces = interfaces
	d.sync() // hold the network before the first client asks
	stop, err := vmnet.Listen(c.Service, d, groupsOf)
	if err != nil {
		d.stop()
		return err
	}
	defer stop()
	log.Info("vmlane-vmnet answering", "service", c.Service, "network", c.Name, "group", c.Group)
	loop(ctx, d, c.SyncPeriod)
	return nil
}

// interfaces lists the Mac's interfaces; a failed listing is an empty
// one (the bridge and the overlap report then name nothing).
func interfaces() []pf.Iface {
	ifs, _ := pf.Interfaces()
	return ifs
}

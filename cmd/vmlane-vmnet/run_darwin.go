package main

import (
	"context"
	"errors"
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
	stop, failed, err := vmnet.Listen(c.Service, d, groupsOf)
	if err != nil {
		d.stop()
		return err
	}
	defer stop()
	log.Info("vmlane-vmnet answering", "service", c.Service, "network", c.Name, "group", c.Group)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var lost bool
	go func() {
		select {
		case <-failed:
			lost = true
			cancel()
		case <-ctx.Done():
		}
	}()
	loop(ctx, d, c.SyncPeriod)
	if lost {
		return errors.New("the XPC listener failed: nothing can acquire the network; exiting for launchd to start vmlane-vmnet again")
	}
	return nil
}

// interfaces lists the Mac's interfaces; a failed listing is an empty
// one (the bridge and the overlap report then name nothing).
func interfaces() []pf.Iface {
	ifs, _ := pf.Interfaces()
	return ifs
}

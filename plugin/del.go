package plugin

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/vmlane/vmlane/internal/antispoof"
	"github.com/vmlane/vmlane/leases"
)

// Del detaches a pod. Everything already gone (netns, links, lease) counts
// as deleted, so DEL can be repeated. A VM's lease (vmlane.io/vm) is held
// for the VM's next pod rather than freed.
func (p *Plugin) Del(args *skel.CmdArgs) error {
	return p.run("DEL", args, func(c *Config, log *slog.Logger) error {
		key := leases.Key{ContainerID: args.ContainerID, IfName: args.IfName}
		// The pod's links first (a VM pod's veth and TAP go in one batch,
		// the veth's host end with them), then the host end in case the
		// netns is gone.
		//
		// The port's anti-spoofing entry is left to vmlaned, which removes
		// the entries of released leases in one transaction every
		// --anti-spoof-period (and GC removes them too). Removing a set
		// element waits for an RCU grace period under the kernel's
		// nftables commit lock, about 13 ms, which would serialize every
		// DEL and ADD on the node behind each other. An entry whose port
		// is gone matches no frame, and the name comes back only for the
		// same attachment, whose ADD gets the entry's address again when
		// it is free (see earlier) and replaces the entry otherwise.
		var errs []error
		held, _ := c.lease(key)
		if args.Netns != "" {
			names := []string{args.IfName}
			// The TAP only if it is this attachment's: after an ADD
			// refused for a TAP name another attachment holds, the
			// runtime's DEL must leave that TAP alone.
			if c.VM || held.VM {
				tap := c.TapFor(args.IfName)
				if s, err := p.dp.TapHolder(args.Netns, tap, args.IfName); err != nil || !s.heldBy(args.IfName) {
					names = append(names, tap)
				}
			}
			if err := p.dp.DeleteNetnsLinks(args.Netns, names...); err != nil {
				errs = append(errs, err)
			}
		}
		if err := p.dp.DeleteHostLink(HostVethName(key)); err != nil {
			errs = append(errs, err)
		}
		for _, dst := range HostRoutes(held) {
			if err := p.dp.UnrouteHost(c.Bridge, dst); err != nil {
				errs = append(errs, err)
			}
		}
		// Links first, then the lease: the address is free for reuse only
		// once no interface answers for it.
		if err := errors.Join(errs...); err != nil {
			return err
		}
		l, ok, err := c.release(key, log)
		if err != nil {
			return err
		}
		log.Info("detached", "released", ok, "ip", l.IP)
		return nil
	})
}

// lease is key's lease, for what DEL removes besides the links it always
// does: a VM pod attached by its vmlane.io/vm annotation has a TAP though
// its network is the plain one (a runtime that does not pass the
// annotation on DEL still gets it removed), and a VM that moved in has its
// host routes. Any error reads as no lease.
func (c *Config) lease(key leases.Key) (leases.Lease, bool) {
	store, err := c.store()
	if err != nil {
		return leases.Lease{}, false
	}
	l, ok, err := store.Get(key)
	return l, err == nil && ok
}

// release frees key's lease for DEL, which must never keep a pod from
// going away: the kubelet retries a failed DEL for ever and the pod stays
// Terminating meanwhile.
//   - A lease file of another subnet means the node's podCIDR changed
//     under running pods (vmlaned has already written the new subnet's
//     conflist, which is what DEL gets): the lease is released in the
//     file's own subnet.
//   - A file the store cannot read (ErrCorrupt) is logged and left for
//     the operator; DEL succeeds, the lease stays on record.
//
// Other errors (the lock, the disk) may pass, so DEL fails and is retried.
func (c *Config) release(key leases.Key, log *slog.Logger) (leases.Lease, bool, error) {
	store, err := c.store()
	if err != nil {
		return leases.Lease{}, false, err
	}
	l, ok, err := store.Release(key)
	if errors.Is(err, leases.ErrSubnetChanged) {
		log.Warn("lease file holds another subnet than the network config (podCIDR changed?): releasing in the file's subnet", "err", err)
		l, ok, err = releaseInFileSubnet(c, key)
	}
	switch {
	case errors.Is(err, leases.ErrCorrupt):
		log.Error("lease file unreadable: the lease stays on record; see docs/troubleshooting.md", "err", err)
		return leases.Lease{}, false, nil
	case err != nil:
		return leases.Lease{}, false, storeError(err)
	}
	return l, ok, nil
}

// releaseInFileSubnet releases key from the lease file in the subnets the
// file itself records, holding a VM's lease for the config's hold time.
func releaseInFileSubnet(c *Config, key leases.Key) (leases.Lease, bool, error) {
	store, err := leases.OpenRecorded(c.LeaseFile, leases.WithVMHold(c.VMHold))
	if err != nil {
		return leases.Lease{}, false, fmt.Errorf("%w: %v", leases.ErrCorrupt, err)
	}
	return store.Release(key)
}

// GC releases every CNI lease whose attachment the runtime no longer lists
// in cni.dev/valid-attachments, and removes its host veth.
func (p *Plugin) GC(args *skel.CmdArgs) error {
	return p.run("GC", args, func(c *Config, log *slog.Logger) error {
		valid := make([]leases.Key, 0, len(c.ValidAttachments))
		for _, a := range c.ValidAttachments {
			valid = append(valid, leases.Key{ContainerID: a.ContainerID, IfName: a.IfName})
		}
		store, err := c.store()
		if err != nil {
			return err
		}
		// The anti-spoofing entries before the leases, as vmlaned lists
		// them (see sweepGuards).
		var listed []antispoof.Port
		if c.Guard {
			v, err := p.dp.Guarded(AntiSpoofTable(c.Bridge))
			if err != nil {
				return fmt.Errorf("reading anti-spoofing ports: %w", err)
			}
			listed = v.Ports
		}
		// Links first, as in DEL: find the stale attachments, remove their
		// host veths, then release their leases.
		var stale []leases.Lease
		if err := store.View(func(tx *leases.Tx) error {
			keep := make(map[leases.Key]bool, len(valid))
			for _, k := range valid {
				keep[k] = true
			}
			for _, l := range tx.Leases() {
				// A lease in a state this version does not know is a
				// newer vmlane's to release: store.GC keeps it, and its
				// link stays with it.
				if l.Source == leases.SourceCNI && l.State.Known() && !keep[l.Key()] {
					stale = append(stale, l)
				}
			}
			return nil
		}); err != nil {
			return storeError(err)
		}
		var errs []error
		for _, l := range stale {
			if err := p.dp.DeleteHostLink(HostVethName(l.Key())); err != nil {
				// Keep the lease while its link may still answer for
				// the address, as DEL does; the next GC tries again.
				errs = append(errs, err)
				valid = append(valid, l.Key())
			}
		}
		released, err := store.GC(valid)
		if err != nil {
			return storeError(err)
		}
		for _, l := range released {
			log.Info("collected", "ip", l.IP, "attachment", l.Key().String())
			// portmap implements no GC: the mappings of an attachment
			// whose DEL never came would stay for ever.
			if c.PortMap {
				if err := p.dp.Unmap(c.Name, c.CNIVersion, l.Key()); err != nil {
					errs = append(errs, fmt.Errorf("removing the hostPort mappings of %s: %w", l.Key(), err))
				}
			}
		}
		if c.Guard {
			errs = append(errs, sweepGuards(p.dp, AntiSpoofTable(c.Bridge), listed, store))
		}
		return errors.Join(errs...)
	})
}

// sweepGuards removes, in one transaction, the anti-spoofing entries of
// listed whose port no lease names any more: those DEL left (see Del) and
// those of the attachments GC collected. listed was read before the lease
// file, so an ADD racing GC, whose lease is written before its entry,
// either has its lease seen here or its entry not listed.
func sweepGuards(dp dataplane, table string, listed []antispoof.Port, store *leases.Store) error {
	ls, err := store.List()
	if err != nil {
		return storeError(err)
	}
	named := make(map[string]bool, len(ls))
	for _, l := range ls {
		named[l.BridgePort] = true
	}
	var sweep []string
	for _, p := range listed {
		if !named[p.Name] && !slices.Contains(sweep, p.Name) {
			sweep = append(sweep, p.Name)
		}
	}
	if len(sweep) == 0 {
		return nil
	}
	if err := dp.Unguard(table, sweep...); err != nil {
		return fmt.Errorf("removing anti-spoofing of stale ports: %w", err)
	}
	return nil
}

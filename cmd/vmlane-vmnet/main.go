// Command vmlane-vmnet holds a macOS 26+ node's pod network and hands it
// to VM runtimes.
//
// It runs as a LaunchDaemon (dev.vmlane.vmnet, manifests/darwin), apart
// from vmlaned so that restarting or upgrading vmlaned never takes the
// network from running VMs. It reads the network description vmlaned
// writes from the Node's podCIDR (--network-file), creates a vmnet shared
// network on that subnet through the vmnet_network API, checks the subnet
// vmnet reports, and answers nirs/vmnet-broker's XPC protocol on its Mach
// service (dev.vmlane.vmnet): a runtime acquires the network by name
// (package pf/vmnet's Acquire, vmnet-helper with the broker's client).
// Only root and the members of --group may. It reports what it holds in
// --state-file, which vmlaned reads for /healthz, readiness and the Node's
// NetworkUnavailable condition. docs/macos.md tells the whole story.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"os/user"
	"strconv"
	"syscall"
	"time"

	"github.com/vmlane/vmlane/internal/version"
	"github.com/vmlane/vmlane/pf"
	"github.com/vmlane/vmlane/pf/vmnet"
)

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

// config is vmlane-vmnet's command line.
type config struct {
	NetworkFile, StateFile, Service, Name, Group string
	Options                                      vmnet.Options
	SyncPeriod                                   time.Duration
	Debug                                        bool
}

func parse(args []string, stderr io.Writer) (config, bool, error) {
	var c config
	fs := flag.NewFlagSet("vmlane-vmnet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.NetworkFile, "network-file", pf.DefaultNetworkFile, "the network description vmlaned writes from the node's podCIDR (vmlaned --vmnet-network-file)")
	fs.StringVar(&c.StateFile, "state-file", vmnet.DefaultStatePath, "where what is held is reported, for vmlaned")
	fs.StringVar(&c.Service, "service", vmnet.ServiceName, "the Mach service to answer on (the launchd job's MachServices must list it)")
	fs.StringVar(&c.Name, "network-name", vmnet.DefaultNetworkName, "the name runtimes acquire the pod network by")
	fs.StringVar(&c.Group, "group", "", "a group (name or number) whose members may acquire the network besides root (default: root only)")
	fs.BoolVar(&c.Options.DisableNAT44, "disable-nat44", false, "turn vmnet's IPv4 NAT off: the VMs reach the outside only if the network routes the podCIDR to this Mac (docs/macos.md)")
	fs.BoolVar(&c.Options.DisableNAT66, "disable-nat66", false, "turn vmnet's IPv6 NAT off")
	fs.DurationVar(&c.SyncPeriod, "sync-period", 2*time.Second, "how often the network description is read")
	fs.BoolVar(&c.Debug, "debug", false, "log every client connection")
	showVersion := fs.Bool("version", false, "print the release and exit")
	if err := fs.Parse(args); err != nil {
		return c, false, err
	}
	if fs.NArg() > 0 {
		return c, false, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if c.SyncPeriod <= 0 {
		return c, false, fmt.Errorf("--sync-period %s: want a positive duration", c.SyncPeriod)
	}
	if c.Name == "" {
		return c, false, fmt.Errorf("--network-name: want a name")
	}
	return c, *showVersion, nil
}

// policy resolves --group: a group name or a number.
func policy(group string, lookup func(string) (*user.Group, error)) (vmnet.Policy, error) {
	if group == "" {
		return vmnet.Policy{}, nil
	}
	if n, err := strconv.ParseUint(group, 10, 32); err == nil {
		return vmnet.Policy{Group: uint32(n), HasGroup: true}, nil
	}
	g, err := lookup(group)
	if err != nil {
		return vmnet.Policy{}, fmt.Errorf("--group %s: %w", group, err)
	}
	n, err := strconv.ParseUint(g.Gid, 10, 32)
	if err != nil {
		return vmnet.Policy{}, fmt.Errorf("--group %s: gid %q: %w", group, g.Gid, err)
	}
	return vmnet.Policy{Group: uint32(n), HasGroup: true}, nil
}

// groupsOf is a user's supplementary groups, for the policy check.
func groupsOf(uid uint32) []uint32 {
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		return nil
	}
	ids, err := u.GroupIds()
	if err != nil {
		return nil
	}
	var out []uint32
	for _, id := range ids {
		if n, err := strconv.ParseUint(id, 10, 32); err == nil {
			out = append(out, uint32(n))
		}
	}
	return out
}

func run(args []string, stderr io.Writer) int {
	c, showVersion, err := parse(args, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "vmlane-vmnet:", err)
		return 2
	}
	if showVersion {
		fmt.Fprintln(os.Stdout, version.String("vmlane-vmnet"))
		return 0
	}
	level := slog.LevelInfo
	if c.Debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	pol, err := policy(c.Group, user.LookupGroup)
	if err != nil {
		fmt.Fprintln(stderr, "vmlane-vmnet:", err)
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	if err := serve(ctx, c, pol, log); err != nil {
		log.Error("vmlane-vmnet stopped", "err", err)
		return 1
	}
	return 0
}

// loop syncs d every period until ctx ends, then releases the network.
func loop(ctx context.Context, d *daemon, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		d.sync()
		select {
		case <-ctx.Done():
			d.stop()
			return
		case <-t.C:
		}
	}
}

// newConfigured is the daemon of c with api.
func newConfigured(c config, pol vmnet.Policy, api vmnet.API, log *slog.Logger) *daemon {
	d := newDaemon(api, log)
	d.descPath, d.statePath, d.service, d.name, d.opts, d.policy = c.NetworkFile, c.StateFile, c.Service, c.Name, c.Options, pol
	return d
}

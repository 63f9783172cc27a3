package plugin

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/vmlane/vmlane/internal/antispoof"
	"github.com/vmlane/vmlane/internal/bridge"
	"github.com/vmlane/vmlane/leases"
)

// SupportedVersions are the CNI spec versions vmlane speaks.
var SupportedVersions = version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")

// dataplane is every kernel effect the plugin has: netlink, tc, sysctls and
// netns. The Linux implementation is netlinkDataplane; tests use a recorder.
// Every delete is idempotent: a missing link or netns is success.
type dataplane interface {
	// DefaultMTU is the MTU of the interface of the default route, 0 if
	// there is none.
	DefaultMTU() int
	// CheckNetns returns errNoNetns if path is not a network namespace.
	CheckNetns(path string) error
	// EnsureBridge makes the bridge exist, up, with mtu and mac, and with
	// gw as its only address of gw's family (a gateway of an older pod
	// CIDR is replaced). A link of that name that is not a bridge is a
	// *bridge.NotBridgeError.
	EnsureBridge(name string, gw netip.Prefix, mtu int, mac string) (Link, error)
	// EnableForwarding turns on IPv4 forwarding in the host netns.
	EnableForwarding() error
	// SetupVeth creates the veth pair: hostIf on bridge in this netns,
	// podIf in netns, both up with mtu. podMAC, if set, is the pod end's
	// MAC. quiet keeps the pod end from sending anything of its own (no
	// IPv6 link-local), as in VM mode where the guest is the only sender.
	SetupVeth(netns, podIf, hostIf, bridge string, mtu int, podMAC string, quiet bool) (host, pod Link, err error)
	// ConfigureAddress puts addr on podIf in netns and a default route via
	// gw.
	ConfigureAddress(netns, podIf string, addr netip.Prefix, gw netip.Addr) error
	// SetupTap creates the TAP in netns and joins it to podIf with tc
	// ingress + mirred egress redirect in both directions.
	SetupTap(netns, tap, podIf string, mtu int, multiQueue bool) (Link, error)
	// DeleteHostLink deletes a link of the host netns (a veth's host end,
	// which takes its peer with it).
	DeleteHostLink(name string) error
	// DeleteNetnsLinks deletes links inside netns.
	DeleteNetnsLinks(netns string, names ...string) error
	// Observe reports the links of an attachment (want names them) as
	// they are; compareAttachment judges them. An error means the bridge
	// itself could not be read.
	Observe(netns string, want Attached) (Observed, error)
	// BridgeStatus returns an error unless the bridge exists and is up.
	BridgeStatus(name string) error
	// Guard makes p the only identity its port may send as; it works
	// before the port exists. Unguard removes a port's identity (none is
	// success), and Guarded lists the ports that have one.
	Guard(p antispoof.Port) error
	Unguard(ports ...string) error
	Guarded() ([]antispoof.Port, error)
}

var errNoNetns = errors.New("no such network namespace")

// errPluginNotAvailable is CNI error 50 (spec 1.1 STATUS: "the plugin is
// not available"); the cni library names no constant for it.
const errPluginNotAvailable uint = 50

// Plugin runs the CNI verbs against a dataplane.
type Plugin struct {
	dp     dataplane
	stderr io.Writer
}

// New returns the plugin for this OS.
func New() *Plugin { return &Plugin{dp: newDataplane(), stderr: os.Stderr} }

// Funcs is the skel dispatch table; main is one PluginMainFuncs call.
func (p *Plugin) Funcs() skel.CNIFuncs {
	return skel.CNIFuncs{Add: p.Add, Del: p.Del, Check: p.Check, Status: p.Status, GC: p.GC}
}

// run parses the config and sets up logging for one verb.
func (p *Plugin) run(verb string, args *skel.CmdArgs, fn func(c *Config, log *slog.Logger) error) error {
	c, err := ParseConfig(args.StdinData, p.dp.DefaultMTU)
	if err != nil {
		return err
	}
	log, closeLog := newLogger(c, p.stderr)
	defer closeLog()
	log = log.With("verb", verb, "containerID", args.ContainerID, "ifname", args.IfName)
	if err := fn(c, log); err != nil {
		log.Error("failed", "err", err)
		return err
	}
	return nil
}

func (c *Config) store() (*leases.Store, error) {
	s, err := leases.Open(c.LeaseFile, c.SubnetPrefix, c.GatewayAddr)
	if err != nil {
		return nil, configError("leaseFile", c.LeaseFile, err.Error())
	}
	return s, nil
}

// Add attaches a pod: bridge, address, veth and, for VM pods, the TAP. On
// any failure it undoes what it did and returns a CNI error.
func (p *Plugin) Add(args *skel.CmdArgs) error {
	return p.run("ADD", args, func(c *Config, log *slog.Logger) (err error) {
		pod, err := ParseArgs(args.Args)
		if err != nil {
			return err
		}
		if err := p.dp.CheckNetns(args.Netns); err != nil {
			return types.NewError(types.ErrUnknownContainer, fmt.Sprintf("netns %q", args.Netns), err.Error())
		}
		store, err := c.store()
		if err != nil {
			return err
		}
		gw := netip.PrefixFrom(c.GatewayAddr, c.SubnetPrefix.Bits())
		br, err := p.dp.EnsureBridge(c.Bridge, gw, c.MTU, DeriveMAC(c.GatewayAddr))
		var nb *bridge.NotBridgeError
		if errors.As(err, &nb) {
			return configError("bridge", c.Bridge, fmt.Sprintf("is an existing link of type %q, not a bridge", nb.Type))
		}
		if err != nil {
			return fmt.Errorf("setting up bridge %s: %w", c.Bridge, err)
		}
		if err := p.dp.EnableForwarding(); err != nil {
			return fmt.Errorf("enabling IPv4 forwarding: %w", err)
		}

		key := leases.Key{ContainerID: args.ContainerID, IfName: args.IfName}
		hostIf := HostVethName(key)
		var port string // recorded so vmlaned keeps the port checked
		if c.Guard {
			port = hostIf
		}
		_, retried, err := store.Get(key)
		if err != nil {
			return storeError(err)
		}
		lease, err := store.Reserve(leases.ReserveRequest{
			Key:        key,
			IP:         c.IP,
			MAC:        c.MAC,
			MACFor:     DeriveMAC,
			Exclude:    c.Exclude,
			NetNS:      args.Netns,
			BridgePort: port,
			VM:         c.VM,
			Pod:        pod,
			Hostname:   pod.Name,
		})
		if err != nil {
			return storeError(err)
		}
		success := false
		defer func() {
			// A retried ADD keeps the earlier ADD's lease: the runtime
			// still owns it until it calls DEL.
			if !success && !retried {
				if _, _, rerr := store.Release(key); rerr != nil {
					log.Error("releasing lease after failed ADD", "ip", lease.IP, "err", rerr)
				}
			}
		}()

		// A retried ADD (or one after an ADD killed halfway, which left its
		// reservation) replaces what the earlier one left: the veth (its
		// pod end goes with it) and the TAP, which outlives the veth. The
		// host veth's name is this attachment's own; the TAP's is not
		// (another network's attachment in the same pod may use it), so
		// it is removed only when this attachment held it before.
		if err := p.dp.DeleteHostLink(hostIf); err != nil {
			return fmt.Errorf("removing stale %s: %w", hostIf, err)
		}
		if c.VM && retried {
			if err := p.dp.DeleteNetnsLinks(args.Netns, c.TapName); err != nil {
				return fmt.Errorf("removing stale %s: %w", c.TapName, err)
			}
		}
		// The port's identity goes in before the port joins the bridge,
		// so none of its frames passes unchecked.
		if c.Guard {
			// The undo is registered before Guard, which can fail after
			// writing.
			defer func() {
				if !success {
					if uerr := p.dp.Unguard(hostIf); uerr != nil {
						log.Error("removing anti-spoofing after failed ADD", "port", hostIf, "err", uerr)
					}
				}
			}()
			if err := guard(p.dp, hostIf, lease); err != nil {
				return err
			}
		}
		podMAC := lease.MAC
		if c.VM {
			podMAC = "" // the guest's MAC must appear on the wire only once
		}
		// Registered before SetupVeth: it can fail after creating the pair.
		defer func() {
			if !success {
				if derr := p.dp.DeleteHostLink(hostIf); derr != nil {
					log.Error("removing veth after failed ADD", "link", hostIf, "err", derr)
				}
			}
		}()
		host, podLink, err := p.dp.SetupVeth(args.Netns, args.IfName, hostIf, c.Bridge, c.MTU, podMAC, c.VM)
		if err != nil {
			return fmt.Errorf("creating veth %s/%s: %w", hostIf, args.IfName, err)
		}
		a := Attached{Bridge: br, HostVeth: host, PodVeth: podLink}
		addr := netip.PrefixFrom(lease.IP, c.SubnetPrefix.Bits())
		if c.VM {
			tap, err := p.dp.SetupTap(args.Netns, c.TapName, args.IfName, c.MTU, c.TapMultiQueue)
			if err != nil {
				if derr := p.dp.DeleteNetnsLinks(args.Netns, c.TapName); derr != nil {
					log.Error("removing TAP after failed ADD", "link", c.TapName, "err", derr)
				}
				return fmt.Errorf("creating TAP %s: %w", c.TapName, err)
			}
			tap.MAC = lease.MAC
			a.Tap = &tap
		} else if err := p.dp.ConfigureAddress(args.Netns, args.IfName, addr, c.GatewayAddr); err != nil {
			return fmt.Errorf("configuring %s on %s: %w", addr, args.IfName, err)
		}

		success = true
		log.Info("attached", "ip", lease.IP, "mac", lease.MAC, "hostVeth", hostIf, "vm", c.VM, "retried", retried)
		return types.PrintResult(BuildResult(c, a, lease.IP), c.CNIVersion)
	})
}

// guard gives the port hostIf the lease's identity.
func guard(dp dataplane, hostIf string, l leases.Lease) error {
	mac, err := net.ParseMAC(l.MAC)
	if err != nil {
		return fmt.Errorf("lease MAC %q: %w", l.MAC, err)
	}
	err = dp.Guard(antispoof.Port{Name: hostIf, MAC: mac, IP: l.IP})
	if errors.Is(err, antispoof.ErrNoKernelSupport) {
		return configError("antiSpoof", true, err.Error()+`; the node's kernel needs nf_tables with the bridge family (CONFIG_NF_TABLES_BRIDGE), or set "antiSpoof": false (see the README's security model)`)
	}
	if err != nil {
		return fmt.Errorf("anti-spoofing for %s: %w", hostIf, err)
	}
	return nil
}

// storeError turns lease store errors into CNI errors: a full subnet is
// worth retrying later (pods may leave), and so is a lock a hung writer
// holds; a corrupt file is not.
func storeError(err error) error {
	switch {
	case errors.Is(err, leases.ErrExhausted):
		return types.NewError(types.ErrTryAgainLater, "no free address: "+err.Error(), "")
	case errors.Is(err, leases.ErrLockTimeout):
		return types.NewError(types.ErrTryAgainLater, "lease store busy: "+err.Error(), "")
	case errors.Is(err, leases.ErrInUse), errors.Is(err, leases.ErrConflict):
		return types.NewError(types.ErrInvalidNetworkConfig, err.Error(), "")
	default:
		return types.NewError(types.ErrIOFailure, "lease store", err.Error())
	}
}

// Del detaches a pod. Everything already gone (netns, links, lease) counts
// as deleted, so DEL can be repeated.
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
		// same attachment, whose ADD replaces it.
		var errs []error
		if args.Netns != "" {
			names := []string{args.IfName}
			if c.VM {
				names = append(names, c.TapName)
			}
			if err := p.dp.DeleteNetnsLinks(args.Netns, names...); err != nil {
				errs = append(errs, err)
			}
		}
		if err := p.dp.DeleteHostLink(HostVethName(key)); err != nil {
			errs = append(errs, err)
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
		l, ok, err = releaseInFileSubnet(c.LeaseFile, key)
	}
	switch {
	case errors.Is(err, leases.ErrCorrupt):
		log.Error("lease file unreadable: the lease stays on record; see `vmlanectl leases` in the README's troubleshooting", "err", err)
		return leases.Lease{}, false, nil
	case err != nil:
		return leases.Lease{}, false, storeError(err)
	}
	return l, ok, nil
}

// releaseInFileSubnet releases key from the lease file at path in the
// subnet the file itself records.
func releaseInFileSubnet(path string, key leases.Key) (leases.Lease, bool, error) {
	snap, err := leases.Read(path)
	if err != nil {
		return leases.Lease{}, false, fmt.Errorf("%w: %v", leases.ErrCorrupt, err)
	}
	store, err := leases.Open(path, snap.File.Subnet, snap.File.Gateway)
	if err != nil {
		return leases.Lease{}, false, fmt.Errorf("%w: lease file %s records subnet %s, gateway %s: %v",
			leases.ErrCorrupt, path, snap.File.Subnet, snap.File.Gateway, err)
	}
	return store.Release(key)
}

// Check verifies an attachment against the result ADD returned.
func (p *Plugin) Check(args *skel.CmdArgs) error {
	return p.run("CHECK", args, func(c *Config, log *slog.Logger) error {
		if c.RawPrevResult == nil {
			return types.NewError(types.ErrInvalidNetworkConfig, "CHECK needs prevResult", "")
		}
		if err := version.ParsePrevResult(&c.PluginConf); err != nil {
			return types.NewError(types.ErrDecodingFailure, "parsing prevResult", err.Error())
		}
		prev, err := current.NewResultFromResult(c.PrevResult)
		if err != nil {
			return types.NewError(types.ErrDecodingFailure, "converting prevResult", err.Error())
		}
		want, err := expectedFromResult(prev, c, args)
		if err != nil {
			return err
		}
		addr := want.Addr
		store, err := c.store()
		if err != nil {
			return err
		}
		key := leases.Key{ContainerID: args.ContainerID, IfName: args.IfName}
		l, ok, err := store.Get(key)
		if err != nil {
			return storeError(err)
		}
		if !ok {
			return fmt.Errorf("no lease for attachment %s", key)
		}
		if l.IP != addr.Addr() {
			return fmt.Errorf("lease of %s holds %s, the result says %s", key, l.IP, addr.Addr())
		}
		if want.Tap != nil && l.MAC != want.Tap.MAC {
			return fmt.Errorf("lease of %s has MAC %s, the result says %s", key, l.MAC, want.Tap.MAC)
		}
		if c.Guard {
			if err := checkGuard(p.dp, want.HostVeth.Name, l); err != nil {
				return err
			}
		}
		o, err := p.dp.Observe(args.Netns, want.Attached)
		if err != nil {
			return err
		}
		return compareAttachment(o, want)
	})
}

// checkGuard reports a port whose anti-spoofing identity is not exactly
// its lease's.
func checkGuard(dp dataplane, port string, l leases.Lease) error {
	ports, err := dp.Guarded()
	if err != nil {
		return fmt.Errorf("reading anti-spoofing ports: %w", err)
	}
	var got []string
	for _, p := range ports {
		if p.Name == port {
			got = append(got, p.MAC.String()+" "+p.IP.String())
		}
	}
	if want := l.MAC + " " + l.IP.String(); len(got) != 1 || got[0] != want {
		return fmt.Errorf("anti-spoofing lets port %s send as %q, want exactly %q", port, got, want)
	}
	return nil
}

// sweepGuards removes, in one transaction, the anti-spoofing entries of
// listed whose port no lease names any more: those DEL left (see Del) and
// those of the attachments GC collected. listed was read before the lease
// file, so an ADD racing GC, whose lease is written before its entry,
// either has its lease seen here or its entry not listed.
func sweepGuards(dp dataplane, listed []antispoof.Port, store *leases.Store) error {
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
	if err := dp.Unguard(sweep...); err != nil {
		return fmt.Errorf("removing anti-spoofing of stale ports: %w", err)
	}
	return nil
}

// expectedFromResult reads back what ADD reported.
func expectedFromResult(r *current.Result, c *Config, args *skel.CmdArgs) (Expected, error) {
	var want Expected
	bad := func(why string) (Expected, error) {
		return Expected{}, types.NewError(types.ErrInvalidNetworkConfig, "prevResult is not vmlane's: "+why, "")
	}
	n := 3
	if c.VM {
		n = 4
	}
	if len(r.Interfaces) != n || len(r.IPs) != 1 {
		return bad(fmt.Sprintf("want %d interfaces and 1 IP, got %d and %d", n, len(r.Interfaces), len(r.IPs)))
	}
	get := func(i int) Link {
		x := r.Interfaces[i]
		return Link{Name: x.Name, MAC: x.Mac, MTU: x.Mtu, Sandbox: x.Sandbox}
	}
	a := &want.Attached
	a.Bridge, a.HostVeth, a.PodVeth = get(ifBridge), get(ifHostVeth), get(ifPodVeth)
	if c.VM {
		t := get(ifTap)
		a.Tap = &t
	}
	if a.PodVeth.Name != args.IfName {
		return bad(fmt.Sprintf("pod interface is %q, CNI_IFNAME is %q", a.PodVeth.Name, args.IfName))
	}
	ip, ok := netip.AddrFromSlice(r.IPs[0].Address.IP)
	if !ok {
		return bad("no address")
	}
	ones, _ := r.IPs[0].Address.Mask.Size()
	want.Addr = netip.PrefixFrom(ip.Unmap(), ones)
	for _, rt := range r.Routes {
		dst, ok := netip.AddrFromSlice(rt.Dst.IP)
		if !ok {
			return bad(fmt.Sprintf("route to %s", rt.Dst.String()))
		}
		ones, _ := rt.Dst.Mask.Size()
		route := Route{Dst: netip.PrefixFrom(dst.Unmap(), ones)}
		if rt.GW != nil {
			if route.Via, ok = netip.AddrFromSlice(rt.GW); !ok {
				return bad(fmt.Sprintf("route to %s via %s", rt.Dst.String(), rt.GW))
			}
			route.Via = route.Via.Unmap()
		}
		want.Routes = append(want.Routes, route)
	}
	return want, nil
}

// Status reports whether the plugin can serve an ADD now (CNI 1.1): the
// bridge is up, the lease file is readable, and an address is free.
func (p *Plugin) Status(args *skel.CmdArgs) error {
	return p.run("STATUS", args, func(c *Config, log *slog.Logger) error {
		if err := p.dp.BridgeStatus(c.Bridge); err != nil {
			return types.NewError(errPluginNotAvailable, fmt.Sprintf("bridge %s is not ready", c.Bridge), err.Error())
		}
		store, err := c.store()
		if err != nil {
			return types.NewError(errPluginNotAvailable, "lease store unusable", err.Error())
		}
		var free bool
		err = store.View(func(tx *leases.Tx) error {
			free = tx.Free(c.Exclude) > 0
			return nil
		})
		if err != nil {
			return types.NewError(errPluginNotAvailable, "lease file unusable", err.Error())
		}
		if !free {
			return types.NewError(errPluginNotAvailable, fmt.Sprintf("subnet %s is full", c.SubnetPrefix), "")
		}
		return nil
	})
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
			if listed, err = p.dp.Guarded(); err != nil {
				return fmt.Errorf("reading anti-spoofing ports: %w", err)
			}
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
		}
		if c.Guard {
			errs = append(errs, sweepGuards(p.dp, listed, store))
		}
		return errors.Join(errs...)
	})
}

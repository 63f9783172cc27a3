package plugin

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
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
	// EnsureBridgeAddr makes gw the bridge's only address of its family
	// but link-local ones (a dual-stack bridge's IPv6 gateway).
	EnsureBridgeAddr(name string, gw netip.Prefix) error
	// EnableForwarding turns on IPv4 forwarding in the host netns.
	EnableForwarding() error
	// EnableForwarding6 turns on IPv6 forwarding in the host netns.
	EnableForwarding6() error
	// EnableProxy makes the node answer ARP and NDP on the bridge for the
	// addresses it routes elsewhere (sysctl.BridgeProxy).
	EnableProxy(bridge string) error
	// SetupVeth creates the veth pair: hostIf on bridge in this netns,
	// podIf in netns, both up with mtu. podMAC, if set, is the pod end's
	// MAC. quiet keeps the pod end from sending anything of its own (no
	// IPv6 link-local), as in VM mode where the guest is the only sender.
	// guard, when set, is the anti-spoofing check of hostIf's ingress
	// (antispoof.Table.Attach), in place before hostIf joins the bridge.
	// hostIf's bridge port has hairpin on: a pod reaches a Service it
	// backs.
	SetupVeth(netns, podIf, hostIf, bridge string, mtu int, podMAC string, quiet bool, guard *VethGuard) (host, pod Link, err error)
	// ConfigureAddress puts addr on podIf in netns and a default route via
	// gw, for either family; an IPv6 address skips duplicate address
	// detection (the lease store is what keeps it unique).
	ConfigureAddress(netns, podIf string, addr netip.Prefix, gw netip.Addr) error
	// SetupTap creates the TAP in netns and joins it to podIf with tc
	// ingress + mirred egress redirect in both directions.
	SetupTap(netns string, t TapSpec) (Link, error)
	// TapHolder reports what holds the link named tap in netns, for the
	// attachment on podIf.
	TapHolder(netns, tap, podIf string) (TapState, error)
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
	// RouteHost routes dst (an address of a VM that moved in from another
	// node's subnet) onto the bridge, scope link, protocol
	// bridge.HostRouteProtocol; UnrouteHost removes that route (none is
	// success).
	RouteHost(bridge string, dst netip.Prefix) error
	UnrouteHost(bridge string, dst netip.Prefix) error
	// Guard makes p the only identity its port may send as, in the
	// anti-spoofing table named table (AntiSpoofTable); it works before
	// the port exists. Unguard removes a port's identity (none is
	// success), and Guarded reads the table: the ports that have one.
	// seen, when set, is what Guarded returned during this ADD: Guard
	// writes against it without reading the table again (see
	// antispoof.Table.AddSeen).
	Guard(table string, p antispoof.Port, seen *antispoof.View) error
	Unguard(table string, ports ...string) error
	Guarded(table string) (antispoof.View, error)
	// Unmap has the portmap plugin remove the hostPort mappings of the
	// attachment key of network (portmap's DEL, which finds them by the
	// network's name and the container ID); none is success.
	Unmap(network, cniVersion string, key leases.Key) error
}

var errNoNetns = errors.New("no such network namespace")

// VethGuard is the port identity SetupVeth checks on the host end's
// ingress, and the anti-spoofing table (AntiSpoofTable) it belongs to.
type VethGuard struct {
	Table string
	Port  antispoof.Port
}

// TapSpec is the TAP SetupTap makes: its name, the pod interface it is
// joined to, and what the runtime that opens it needs (MTU, queues, the
// user and group that may open it).
type TapSpec struct {
	Name, PodIf  string
	MTU          int
	MultiQueue   bool
	Owner, Group uint32
}

// TapState is what holds a TAP name in a pod: nothing (Exists false), a
// TAP SetupTap made (Vmlane; Mine when it made it for the asking pod
// interface), and the pod interface its redirect joins it to (Holder,
// empty when that interface is gone: a TAP left behind).
type TapState struct {
	Exists, Vmlane, Mine bool
	Holder               string
}

// heldBy reports whether the TAP belongs to something other than the
// attachment on ifName: another attachment's live interface, or a link
// vmlane did not make. A TAP left behind is nobody's.
func (s TapState) heldBy(ifName string) bool {
	return s.Exists && !s.Mine && (!s.Vmlane || s.Holder != "" && s.Holder != ifName)
}

// tapTaken is ADD's refusal of a TAP name another link of the pod holds.
// Without it, a second attachment would open the first one's TAP (opening
// a persistent TAP by name attaches to it) and take over its traffic.
func tapTaken(c *Config, tap, ifName string, s TapState) error {
	var holder string
	switch {
	case !s.Vmlane:
		holder = "a link vmlane did not make"
	default:
		holder = "the TAP of the attachment on " + s.Holder
	}
	field := "tapName " + fmt.Sprintf("%q", c.TapName)
	if c.TapName == "" {
		field = "the TAP name derived from ifname " + ifName
	}
	return types.NewError(types.ErrInvalidNetworkConfig,
		fmt.Sprintf("TAP %s for the attachment on %s is already in the pod: it is %s", tap, ifName, holder),
		field+" collides; give each network of the pod its own tapName, or leave tapName unset so that the TAP follows the ifname (net1 gets tap1)")
}

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
	opts := []leases.Option{leases.WithVMHold(c.VMHold)}
	if c.DualStack() {
		opts = append(opts, leases.WithSubnet6(c.Subnet6Prefix, c.Gateway6Addr))
	}
	s, err := leases.Open(c.LeaseFile, c.SubnetPrefix, c.GatewayAddr, opts...)
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
		vmName, err := c.vmIdentity(pod)
		if err != nil {
			return err
		}
		if err := p.dp.CheckNetns(args.Netns); err != nil {
			return types.NewError(types.ErrUnknownContainer, fmt.Sprintf("netns %q", args.Netns), err.Error())
		}
		var tap string
		var tapState TapState
		if c.VM {
			tap = c.TapFor(args.IfName)
			if tapState, err = p.dp.TapHolder(args.Netns, tap, args.IfName); err != nil {
				return fmt.Errorf("looking for TAP %s in the pod: %w", tap, err)
			}
			if tapState.heldBy(args.IfName) {
				return tapTaken(c, tap, args.IfName, tapState)
			}
		}
		store, err := c.store()
		if err != nil {
			return err
		}
		gw := netip.PrefixFrom(c.GatewayAddr, c.SubnetPrefix.Bits())
		br, err := p.dp.EnsureBridge(c.Bridge, gw, c.MTU, GatewayMAC)
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
		if err := p.dp.EnableProxy(c.Bridge); err != nil {
			// Only VMs that moved between nodes need it.
			log.Warn("proxy ARP and NDP on the bridge: VMs that move between nodes lose their home subnet", "err", err)
		}
		if c.DualStack() {
			gw6 := netip.PrefixFrom(c.Gateway6Addr, c.Subnet6Prefix.Bits())
			if err := p.dp.EnsureBridgeAddr(c.Bridge, gw6); err != nil {
				return fmt.Errorf("putting IPv6 gateway %s on bridge %s: %w", gw6, c.Bridge, err)
			}
			if err := p.dp.EnableForwarding6(); err != nil {
				return fmt.Errorf("enabling IPv6 forwarding: %w", err)
			}
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
		req := leases.ReserveRequest{
			Key:        key,
			IP:         c.IP,
			IP6:        c.IP6,
			MAC:        c.MAC,
			MACFor:     DeriveMAC,
			Exclude:    c.Exclude,
			NetNS:      args.Netns,
			BridgePort: port,
			VM:         c.VM,
			VMName:     vmName,
			// A pod of the VM whose netns is gone left without DEL
			// (a node that rebooted): its lease is the VM's to take.
			Stale: func(l leases.Lease) bool {
				return l.NetNS != "" && errors.Is(p.dp.CheckNetns(l.NetNS), errNoNetns)
			},
			Pod:      pod,
			Hostname: pod.Name,
		}
		// migrationTarget: the VM runs on another node, and this pod is
		// its live migration's target.
		var migrationTarget bool
		if vmName != "" {
			if migrationTarget, err = c.claimed(&req); err != nil {
				return err
			}
		}
		var seen *antispoof.View
		if c.Guard && !retried {
			seen = p.earlier(AntiSpoofTable(c.Bridge), hostIf, &req, log)
		}
		lease, err := store.Reserve(req)
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
		if c.VM && (retried || tapState.Exists) {
			if err := p.dp.DeleteNetnsLinks(args.Netns, tap); err != nil {
				return fmt.Errorf("removing stale %s: %w", tap, err)
			}
		}
		// The port's identity goes in before the port joins the bridge,
		// so none of its frames passes unchecked: its addresses before
		// the port exists, its ingress check (vg) once the link exists
		// and before it joins the bridge.
		var vg *VethGuard
		if c.Guard {
			// The undo is registered before Guard, which can fail after
			// writing.
			defer func() {
				if !success {
					if uerr := p.dp.Unguard(AntiSpoofTable(c.Bridge), hostIf); uerr != nil {
						log.Error("removing anti-spoofing after failed ADD", "port", hostIf, "err", uerr)
					}
				}
			}()
			gp, err := guardPort(hostIf, lease)
			if err != nil {
				return err
			}
			if err := guard(p.dp, AntiSpoofTable(c.Bridge), gp, seen); err != nil {
				return err
			}
			vg = &VethGuard{Table: AntiSpoofTable(c.Bridge), Port: gp}
		}
		// A VM whose addresses moved in from another node's subnet is
		// reached through the bridge by a host route each; but not yet
		// for a live migration's target, whose guest still runs on the
		// source: until the VM's claim names this node, this node's pods
		// and host reach the VM through the source (the route controller's
		// route via it), and vmlaned adds the host route when the claim
		// moves here (it hears the guest on this pod's port).
		hostRoutes := HostRoutes(lease)
		if migrationTarget {
			hostRoutes = nil
		}
		for _, dst := range hostRoutes {
			defer func() {
				if !success {
					if uerr := p.dp.UnrouteHost(c.Bridge, dst); uerr != nil {
						log.Error("removing host route after failed ADD", "dst", dst, "err", uerr)
					}
				}
			}()
			if err := p.dp.RouteHost(c.Bridge, dst); err != nil {
				return fmt.Errorf("routing %s onto %s: %w", dst, c.Bridge, err)
			}
		}
		podMAC := lease.MAC
		if c.VM && c.PodMAC != PodMACGuest {
			podMAC = "" // the kernel's: the guest's MAC is the TAP's entry
		}
		// Registered before SetupVeth: it can fail after creating the pair.
		defer func() {
			if !success {
				if derr := p.dp.DeleteHostLink(hostIf); derr != nil {
					log.Error("removing veth after failed ADD", "link", hostIf, "err", derr)
				}
			}
		}()
		host, podLink, err := p.dp.SetupVeth(args.Netns, args.IfName, hostIf, c.Bridge, c.MTU, podMAC, c.VM, vg)
		if err != nil {
			if errors.Is(err, antispoof.ErrNoKernelSupport) {
				return noKernelSupport(err)
			}
			return fmt.Errorf("creating veth %s/%s: %w", hostIf, args.IfName, err)
		}
		a := Attached{Bridge: br, HostVeth: host, PodVeth: podLink}
		addr := netip.PrefixFrom(lease.IP, c.SubnetPrefix.Bits())
		if c.VM {
			tl, err := p.dp.SetupTap(args.Netns, TapSpec{
				Name: tap, PodIf: args.IfName, MTU: c.MTU, MultiQueue: c.TapMultiQueue, Owner: c.TapUID, Group: c.TapGID,
			})
			if err != nil {
				if derr := p.dp.DeleteNetnsLinks(args.Netns, tap); derr != nil {
					log.Error("removing TAP after failed ADD", "link", tap, "err", derr)
				}
				return fmt.Errorf("creating TAP %s: %w", tap, err)
			}
			tl.MAC = lease.MAC
			a.Tap = &tl
		} else {
			if err := p.dp.ConfigureAddress(args.Netns, args.IfName, addr, c.GatewayAddr); err != nil {
				return fmt.Errorf("configuring %s on %s: %w", addr, args.IfName, err)
			}
			if lease.IP6.IsValid() {
				addr6 := netip.PrefixFrom(lease.IP6, c.Subnet6Prefix.Bits())
				if err := p.dp.ConfigureAddress(args.Netns, args.IfName, addr6, c.Gateway6Addr); err != nil {
					return fmt.Errorf("configuring %s on %s: %w", addr6, args.IfName, err)
				}
			}
		}

		success = true
		log.Info("attached", "ip", lease.IP, "ip6", lease.IP6, "mac", lease.MAC, "hostVeth", hostIf, "vm", c.VM, "vmName", vmName, "retried", retried)
		rc := c
		if lease.Home.IsValid() {
			// The guest is told its home subnet and gateway by DHCP
			// here too (the bridge answers ARP for that gateway).
			home := *c
			home.SubnetPrefix, home.GatewayAddr = lease.Home, lease.Home.Addr().Next()
			rc = &home
		}
		return types.PrintResult(BuildResult(rc, a, lease.IP, lease.IP6), c.CNIVersion)
	})
}

// HostRoutes are the routes onto the bridge a lease that moved in needs:
// its addresses lie outside the bridge's subnets.
func HostRoutes(l leases.Lease) []netip.Prefix {
	var out []netip.Prefix
	if l.Home.IsValid() {
		out = append(out, netip.PrefixFrom(l.IP, 32))
	}
	if l.Home6.IsValid() && l.IP6.IsValid() {
		out = append(out, netip.PrefixFrom(l.IP6, 128))
	}
	return out
}

// vmIdentity is the VM the pod belongs to, "NAMESPACE/NAME", from its
// vmlane.io/vm annotation; empty for a pod without one.
func (c *Config) vmIdentity(pod leases.Pod) (string, error) {
	if _, ok := c.RuntimeConfig.PodAnnotations[VMAnnotation]; !ok {
		return "", nil
	}
	field := "annotation " + VMAnnotation
	if pod.Namespace == "" {
		return "", configError(field, c.VMName, "needs the pod's namespace, and CNI_ARGS has no K8S_POD_NAMESPACE")
	}
	name, err := leases.VMName(pod.Namespace, c.VMName)
	if err != nil {
		return "", configError(field, c.VMName, err.Error())
	}
	return name, nil
}

// earlier returns the addresses the anti-spoofing table still gives the
// port hostIf: those of an earlier attachment with the same key, which
// DEL left in place (see Del). Allocating them again, when they are free,
// leaves that entry exactly as the new lease needs it, so Guard writes
// nothing; a different address would make Guard delete the entry, and a
// transaction that deletes costs an RCU grace period, under the lock
// every nftables change on the node takes. A runtime that retries with
// the same container ID, or a kubelet that restarts, would pay it on
// every ADD. It sets req's preferred addresses and returns what it read,
// for Guard to write against; nil (and no preference) when the read
// failed.
func (p *Plugin) earlier(table, hostIf string, req *leases.ReserveRequest, log *slog.Logger) *antispoof.View {
	v, err := p.dp.Guarded(table)
	if err != nil {
		log.Debug("reading anti-spoofing ports", "err", err)
		return nil
	}
	for _, g := range v.Ports {
		if g.Name == hostIf {
			req.Prefer, req.Prefer6 = g.IP, g.IP6
		}
	}
	return &v
}

// guardPort is the identity the port hostIf may send as: the lease's.
func guardPort(hostIf string, l leases.Lease) (antispoof.Port, error) {
	mac, err := net.ParseMAC(l.MAC)
	if err != nil {
		return antispoof.Port{}, fmt.Errorf("lease MAC %q: %w", l.MAC, err)
	}
	return antispoof.Port{Name: hostIf, MAC: mac, IP: l.IP, IP6: l.IP6}, nil
}

// guard gives the port p.Name the identity p; seen is as for
// dataplane.Guard.
func guard(dp dataplane, table string, p antispoof.Port, seen *antispoof.View) error {
	err := dp.Guard(table, p, seen)
	if errors.Is(err, antispoof.ErrNoKernelSupport) {
		return noKernelSupport(err)
	}
	if err != nil {
		return fmt.Errorf("anti-spoofing for %s: %w", p.Name, err)
	}
	return nil
}

// noKernelSupport is the config error of a kernel without what
// anti-spoofing needs.
func noKernelSupport(err error) error {
	return configError("antiSpoof", true, err.Error()+`; the node's kernel needs nf_tables with the bridge and netdev families (CONFIG_NF_TABLES_BRIDGE, CONFIG_NF_TABLES_NETDEV), or set "antiSpoof": false (see docs/security.md)`)
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
	case errors.Is(err, leases.ErrVMInUse):
		// The holder may be a pod on its way out: worth a retry.
		return types.NewError(types.ErrTryAgainLater, err.Error(), "")
	case errors.Is(err, leases.ErrInUse), errors.Is(err, leases.ErrConflict):
		return types.NewError(types.ErrInvalidNetworkConfig, err.Error(), "")
	default:
		return types.NewError(types.ErrIOFailure, "lease store", err.Error())
	}
}

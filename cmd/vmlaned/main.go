// Command vmlaned is vmlane's node daemon. On a Kubernetes node it reads
// its own Node's podCIDRs, sets the node up (bridge, CNI conflists, the
// NetworkUnavailable condition), serves DHCP on the bridge from the lease
// file (package dhcp), and runs the route controller, which routes every
// other node's pod subnets directly and keeps pod-to-pod traffic un-NATed.
// With --pod-cidr and no cluster it runs standalone: bridge, conflists, DHCP
// and leases for that subnet, for hosts that run VMs without Kubernetes.
//
// SIGTERM and SIGINT stop the daemon and leave routes, rules, the bridge and
// the conflists in place, so a restart or an upgrade does not cut traffic;
// `vmlanectl teardown` removes them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vmlane/vmlane/internal/peer"
	"github.com/vmlane/vmlane/internal/ra"
	"github.com/vmlane/vmlane/internal/version"
	"github.com/vmlane/vmlane/leases"
	"github.com/vmlane/vmlane/pf"
	pfvmnet "github.com/vmlane/vmlane/pf/vmnet"
	"github.com/vmlane/vmlane/plugin"
	"github.com/vmlane/vmlane/routes"
	"github.com/vmlane/vmlane/routes/bgp"
)

// config is vmlaned's flags, parsed and checked.
type config struct {
	Kubeconfig string
	NodeName   string
	PodCIDR    netip.Prefix // standalone mode when set
	// PodCIDR6 is the node's IPv6 podCIDR on a dual-stack node (from
	// --pod-cidr, or the Node's spec.podCIDRs); zero otherwise.
	PodCIDR6     netip.Prefix
	ClusterCIDRs []netip.Prefix
	// RoutesOnly is routes-only mode (--routes-only): on a node of
	// another CNI, route the VM nodes' pod subnets and nothing else.
	// Ignored lists the flags only full mode uses that were given, which
	// routes-only mode ignores (one DaemonSet template may carry both
	// modes' flags).
	RoutesOnly bool
	Ignored    []string
	// ServiceCIDRs are the cluster's Service CIDRs; with RouteServices
	// (a node without kube-proxy) they are routed via a Service gateway,
	// without it this node is a gateway (routes.Policy).
	ServiceCIDRs  []netip.Prefix
	RouteServices bool
	// CrossSubnet is --cross-subnet (routes.CrossSubnetModes); VXLANVNI
	// and VXLANPort are the VXLAN device's; Underlay is this node's
	// underlay address (its first next-hop address), looked up at start
	// in VXLAN mode.
	CrossSubnet         string
	VXLANVNI, VXLANPort int
	Underlay            netip.Addr
	// BGP (--cross-subnet=bgp): the node's ASN, its peers, the router ID
	// (zero: the node's IPv4 address), the file of the MD5 password
	// (a Secret's key, mounted) and how many prefixes of a family a peer
	// may send.
	BGPASN          uint32
	BGPPeers        peerList
	BGPRouterID     netip.Addr
	BGPPasswordFile string
	BGPMaxPrefixes  uint32
	// PeerKeyFile is the cluster's key of live-migration notices (a
	// Secret's key, mounted; empty or absent: no notices), PeerPort
	// their UDP port (peers.go).
	PeerKeyFile string
	PeerPort    int
	// Announcer is the BGP speaker the route controller tells what to
	// announce (set at start in bgp mode).
	Announcer     routes.Announcer
	RouteProtocol int
	Resync        time.Duration
	Masquerade    bool
	// AntiSpoof is written into the conflists; AntiSpoofPeriod is how
	// often the anti-spoofing table is checked against the lease file.
	AntiSpoof       bool
	AntiSpoofPeriod time.Duration
	CNIConfDir      string
	// VMCNIConfDir is where the VM conflist goes (CNIConfDir if empty):
	// a folder of its own lets a CRI runtime handler for VM pods use it
	// (containerd's per-runtime cni_conf_dir) while plain pods use the
	// plain conflist.
	VMCNIConfDir string
	// CNIVersion pins the conflists' cniVersion ("" for auto: see
	// compatVersion).
	CNIVersion       string
	NodeIPAnnotation string
	HealthAddr       string
	MetricsAddr      string
	Bridge           string
	LeaseFile        string
	MTU              int
	LeaseTime        time.Duration
	VMHoldTime       time.Duration
	DNS, Search      []string
	Domain           string
	// DHCPRange is the dynamic range for VMs attached without CNI (nil:
	// only CNI reservations are served).
	DHCPRange     *leases.Pool
	DHCPRangeText string
	LogLevel      slog.Level
	// LogFile, when set, receives the log instead of stderr and is opened
	// again on SIGHUP (log rotation); PidFile is written for the rotator
	// to signal.
	LogFile, PidFile string
	// macOS nodes only (ignored elsewhere): vmnet's plist (up to macOS
	// 15), the pf anchor of the no-nat rules, and the network description
	// for the vmnet_network API (macOS 26 and later).
	VmnetPlist       string
	PFAnchor         string
	VmnetNetworkFile string
	// VmnetStateFile is vmlane-vmnet's report (macOS 26 and later).
	VmnetStateFile string
	// BootpdPlist is bootpd's configuration, where
	// dhcp_ignore_client_identifier is set unless BootpdKeepClientID.
	BootpdPlist        string
	BootpdKeepClientID bool

	// ra6 is what the bridge's router advertisements say (set by the
	// DHCPv6 setup, before the claims sync starts): a guest that moved in
	// gets the same with its home subnet (ndproxy). Nil on a node without
	// IPv6.
	ra6 *ra.Config
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	c := &config{BGPMaxPrefixes: bgp.DefaultMaxPrefixes}
	fs := flag.NewFlagSet("vmlaned", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var podCIDR, clusterCIDR, serviceCIDR, dns, search, logLevel, cniVersion string
	fs.BoolVar(&c.RoutesOnly, "routes-only", false, "routes-only mode, for the nodes of another CNI in a hybrid cluster: route the pod subnets of the VM nodes (labelled "+routes.VMNodeLabel+"=true) and nothing else (no bridge, conflist, DHCP or lease file); without --node-name, for a host that is not a node (a control plane whose API server must reach pods): route every node's pod subnets")
	fs.StringVar(&serviceCIDR, "service-cidr", "", "the cluster's Service CIDRs, comma-separated (kube-apiserver --service-cluster-ip-range): a node with --route-services routes them via a Service gateway, any other Linux node masquerades other nodes' traffic to them as a gateway")
	fs.BoolVar(&c.RouteServices, "route-services", runtime.GOOS == "darwin", "this node runs no kube-proxy: route --service-cidr via a Service gateway, a Ready Linux node that is not a VM node (default true on macOS)")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig file; empty uses the in-cluster config")
	fs.StringVar(&c.NodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	fs.StringVar(&podCIDR, "pod-cidr", "", "standalone mode: serve this subnet without Kubernetes (IPv4, or IPv4,IPv6 for dual stack)")
	fs.StringVar(&clusterCIDR, "cluster-cidr", "", "the cluster's pod network, comma-separated (default: every node's podCIDRs)")
	fs.StringVar(&c.CrossSubnet, "cross-subnet", routes.CrossSubnetOff, "what to do for nodes whose address is not on a subnet of this node: off (no route; an Event says so), bgp (announce this node's pod subnets to the --bgp-peer routers, which route them) or vxlan (through vmlane's VXLAN device, Linux only)")
	var bgpASN, bgpRouterID string
	fs.StringVar(&bgpASN, "bgp-asn", "", "--cross-subnet=bgp: this node's AS number (a Node may set its own with the "+bgp.AnnotationASN+" annotation)")
	fs.Var(&c.BGPPeers, "bgp-peer", "--cross-subnet=bgp: a router to peer with, ADDR:ASN or [IPV6]:ASN; repeat for more (a Node may list its own in the "+bgp.AnnotationPeers+" annotation, comma-separated)")
	fs.StringVar(&bgpRouterID, "bgp-router-id", "", "--cross-subnet=bgp: the BGP router ID (default: the node's IPv4 address)")
	fs.Func("bgp-max-prefixes", fmt.Sprintf("--cross-subnet=bgp: how many prefixes of each family a peer may send before its session is ended (vmlaned learns nothing, but keeps what peers send until it is rejected); 0 is no limit (default %d)", bgp.DefaultMaxPrefixes), func(v string) error {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return fmt.Errorf("want a number of prefixes, 0 for no limit")
		}
		c.BGPMaxPrefixes = uint32(n)
		return nil
	})
	fs.StringVar(&c.BGPPasswordFile, "bgp-password-file", "", "--cross-subnet=bgp: a file holding the TCP MD5 password of every session (a Secret's key, mounted)")
	fs.StringVar(&c.PeerKeyFile, "peer-key-file", peer.DefaultKeyFile, "a file holding the cluster's key of live-migration notices (the Secret vmlane-peer, mounted; at least 32 bytes): a migration's target tells every other node at once, ahead of the VM's claim; while the file is missing, and with an empty value, routes move by the claim alone")
	fs.IntVar(&c.PeerPort, "peer-port", peer.DefaultPort, "the UDP port of live-migration notices, on each node's address (--peer-key-file)")
	fs.IntVar(&c.VXLANVNI, "vxlan-vni", routes.DefaultVXLANVNI, "--cross-subnet=vxlan: the VXLAN network identifier (flannel uses 1, Calico 4096)")
	fs.IntVar(&c.VXLANPort, "vxlan-port", routes.DefaultVXLANPort, "--cross-subnet=vxlan: the VXLAN UDP port (flannel uses 8472)")
	fs.IntVar(&c.RouteProtocol, "route-protocol", routes.DefaultProtocol, "route protocol number that marks vmlane's routes")
	fs.DurationVar(&c.Resync, "resync-period", 30*time.Second, "how often routes and rules are checked without events")
	fs.BoolVar(&c.Masquerade, "masquerade", true, "masquerade pod traffic that leaves the pod network")
	fs.BoolVar(&c.AntiSpoof, "anti-spoof", true, "keep each pod and VM to its own MAC and address on the bridge (written into the conflists as \"antiSpoof\")")
	fs.DurationVar(&c.AntiSpoofPeriod, "anti-spoof-period", 5*time.Second, "how often the anti-spoofing table is checked and repaired")
	fs.StringVar(&c.CNIConfDir, "cni-conf-dir", plugin.DefaultConfDir, "where the CNI conflists are written")
	fs.StringVar(&c.VMCNIConfDir, "vm-cni-conf-dir", "", "where the VM pods' conflist is written, for a CRI runtime handler of VM pods (default: --cni-conf-dir)")
	fs.StringVar(&cniVersion, "cni-version", autoCNIVersion, "cniVersion of the conflists: auto (1.0.0 for containerd 1.x, 1.1.0 for runtimes that read cniVersions) or one of "+strings.Join(plugin.SupportedVersions.SupportedVersions(), ", "))
	fs.StringVar(&c.NodeIPAnnotation, "node-ip-annotation", "", "annotation whose address overrides a node's InternalIP as next hop")
	fs.StringVar(&c.HealthAddr, "health-addr", "127.0.0.1:9465", "address of /healthz and /readyz (never the VM bridge)")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", "127.0.0.1:9464", "address of /metrics (never the VM bridge)")
	fs.StringVar(&c.Bridge, "bridge", plugin.DefaultBridge, "the VM bridge")
	fs.StringVar(&c.LeaseFile, "lease-file", leases.DefaultPath, "the lease file")
	fs.IntVar(&c.MTU, "mtu", 0, "MTU of the bridge and pod links (default: the plugin's, from the default route)")
	fs.DurationVar(&c.LeaseTime, "lease-time", time.Hour, "DHCP lease time")
	fs.DurationVar(&c.VMHoldTime, "vm-hold-time", plugin.DefaultVMHoldTime, "how long a VM's addresses and MAC (pods annotated vmlane.io/vm) stay held after its pod goes")
	fs.StringVar(&dns, "dns", "", "DNS servers for pods, comma-separated")
	fs.StringVar(&search, "search", "", "DNS search domains, comma-separated")
	fs.StringVar(&c.Domain, "domain", "", "DNS domain")
	fs.StringVar(&c.DHCPRangeText, "dhcp-range", "", "dynamic DHCP range FIRST-LAST for VMs attached without CNI (default: none)")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.LogFile, "log-file", "", "write the log to this file instead of stderr, and open it again on SIGHUP (log rotation)")
	fs.StringVar(&c.PidFile, "pid-file", "", "write the daemon's pid here (for a log rotator to send SIGHUP)")
	fs.StringVar(&c.VmnetPlist, "vmnet-plist", pf.DefaultVmnetPlist, "macOS up to 15: vmnet's plist, where the node's subnet is written")
	fs.StringVar(&c.PFAnchor, "pf-anchor", pf.DefaultAnchor, "macOS: the pf anchor (under com.apple/) that holds vmlane's no-nat rules")
	fs.StringVar(&c.VmnetNetworkFile, "vmnet-network-file", pf.DefaultNetworkFile, "macOS 26 and later: where the JSON description of the node's vmnet network is written for vmlane-vmnet")
	fs.StringVar(&c.VmnetStateFile, "vmnet-state-file", pfvmnet.DefaultStatePath, "macOS 26 and later: vmlane-vmnet's report of the network it holds (vmlane-vmnet --state-file)")
	fs.StringVar(&c.BootpdPlist, "bootpd-plist", pf.DefaultBootpdPlist, "macOS: bootpd's configuration, where dhcp_ignore_client_identifier is set so that leases are found by MAC")
	ignoreCID := fs.Bool("bootpd-ignore-client-id", true, "macOS: make bootpd key leases on the guest's MAC, not on its DHCP client identifier (false leaves bootpd's plist alone)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *showVersion {
		fmt.Fprintln(stderr, version.String("vmlaned"))
		return nil, flag.ErrHelp
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	routeServicesSet := false
	fs.Visit(func(f *flag.Flag) { routeServicesSet = routeServicesSet || f.Name == "route-services" })
	if c.RoutesOnly {
		if runtime.GOOS != "linux" {
			return nil, errors.New("--routes-only is for Linux nodes of another CNI; a macOS node is a VM node and runs in full mode")
		}
		// Back to their defaults, unchecked: they are not used.
		fs.Visit(func(f *flag.Flag) {
			if fullModeOnly[f.Name] {
				c.Ignored = append(c.Ignored, "--"+f.Name)
				f.Value.Set(f.DefValue)
			}
		})
		c.RouteServices = false
	}
	if err := c.LogLevel.UnmarshalText([]byte(logLevel)); err != nil {
		return nil, fmt.Errorf("invalid --log-level %q: want debug, info, warn or error", logLevel)
	}
	if c.VMCNIConfDir == "" {
		c.VMCNIConfDir = c.CNIConfDir
	}
	if cniVersion != autoCNIVersion {
		if !slices.Contains(plugin.SupportedVersions.SupportedVersions(), cniVersion) {
			return nil, fmt.Errorf("invalid --cni-version %q: want auto or one of %s", cniVersion, strings.Join(plugin.SupportedVersions.SupportedVersions(), ", "))
		}
		c.CNIVersion = cniVersion
	}
	if podCIDR != "" {
		var cidrs []netip.Prefix
		for _, f := range splitList(podCIDR) {
			p, err := netip.ParsePrefix(f)
			if err != nil || p != p.Masked() {
				return nil, fmt.Errorf("invalid --pod-cidr %q: %q is not a network CIDR", podCIDR, f)
			}
			cidrs = append(cidrs, p)
		}
		v4, v6, err := splitPodCIDRs(cidrs)
		if err != nil {
			return nil, fmt.Errorf("invalid --pod-cidr %q: %w", podCIDR, err)
		}
		c.PodCIDR, c.PodCIDR6 = v4, v6
	} else if c.NodeName == "" && !c.RoutesOnly {
		return nil, errors.New("--node-name (or $NODE_NAME) is required unless --pod-cidr runs vmlaned standalone, or --routes-only runs it on a host that is not a node")
	}
	for _, s := range splitList(serviceCIDR) {
		p, err := netip.ParsePrefix(s)
		if err != nil || p != p.Masked() {
			return nil, fmt.Errorf("invalid --service-cidr %q: %q is not a network CIDR", serviceCIDR, s)
		}
		if slices.ContainsFunc(c.ServiceCIDRs, func(q netip.Prefix) bool { return q.Addr().Is4() == p.Addr().Is4() }) {
			return nil, fmt.Errorf("invalid --service-cidr %q: two CIDRs of one family (a cluster has at most one Service CIDR of each)", serviceCIDR)
		}
		c.ServiceCIDRs = append(c.ServiceCIDRs, p)
	}
	if c.RouteServices && len(c.ServiceCIDRs) == 0 {
		if routeServicesSet {
			return nil, errors.New("--route-services needs --service-cidr: the Service CIDRs to route")
		}
		c.RouteServices = false // macOS's default, with nothing to route
	}
	for _, s := range splitList(clusterCIDR) {
		p, err := netip.ParsePrefix(s)
		if err != nil || p != p.Masked() {
			return nil, fmt.Errorf("invalid --cluster-cidr %q: not a network CIDR", s)
		}
		c.ClusterCIDRs = append(c.ClusterCIDRs, p)
	}
	if !slices.Contains(routes.CrossSubnetModes, c.CrossSubnet) {
		return nil, fmt.Errorf("invalid --cross-subnet %q: want %s", c.CrossSubnet, strings.Join(routes.CrossSubnetModes, ", "))
	}
	if c.CrossSubnet == routes.CrossSubnetVXLAN && runtime.GOOS != "linux" {
		return nil, errors.New("invalid --cross-subnet vxlan: VXLAN is for Linux nodes (macOS has no VXLAN device); a macOS node announces its pod subnet with --cross-subnet=bgp")
	}
	if c.CrossSubnet != routes.CrossSubnetOff && c.PodCIDR.IsValid() {
		return nil, fmt.Errorf("--cross-subnet %s needs a cluster: a standalone node (--pod-cidr) has no other nodes to reach", c.CrossSubnet)
	}
	if c.RoutesOnly && c.NodeName == "" && c.CrossSubnet == routes.CrossSubnetVXLAN {
		return nil, errors.New("--cross-subnet vxlan needs --node-name: the tunnel's underlay address is the node's, and a host that is not a node has none in the API; route it directly (off) or through the fabric")
	}
	if c.CrossSubnet == routes.CrossSubnetBGP && c.RoutesOnly {
		return nil, errors.New("--cross-subnet bgp announces this node's pod subnets, which in --routes-only mode are the other CNI's to announce; use vxlan or off")
	}
	if bgpASN != "" {
		asn, err := bgp.ParseASN(bgpASN)
		if err != nil {
			return nil, fmt.Errorf("invalid --bgp-asn: %w", err)
		}
		c.BGPASN = asn
	}
	if bgpRouterID != "" {
		a, err := netip.ParseAddr(bgpRouterID)
		if err != nil || !a.Is4() {
			return nil, fmt.Errorf("invalid --bgp-router-id %q: want an IPv4 address", bgpRouterID)
		}
		c.BGPRouterID = a
	}
	if c.BGPPasswordFile != "" && !filepath.IsAbs(c.BGPPasswordFile) {
		return nil, fmt.Errorf("invalid --bgp-password-file %q: want an absolute path", c.BGPPasswordFile)
	}
	if c.PeerKeyFile != "" && !filepath.IsAbs(c.PeerKeyFile) {
		return nil, fmt.Errorf("invalid --peer-key-file %q: want an absolute path", c.PeerKeyFile)
	}
	if c.PeerPort < 1 || c.PeerPort > 65535 {
		return nil, fmt.Errorf("invalid --peer-port %d: want 1-65535", c.PeerPort)
	}
	if c.VXLANVNI < 1 || c.VXLANVNI > 1<<24-1 {
		return nil, fmt.Errorf("invalid --vxlan-vni %d: want 1-16777215", c.VXLANVNI)
	}
	if c.VXLANPort < 1 || c.VXLANPort > 65535 {
		return nil, fmt.Errorf("invalid --vxlan-port %d: want 1-65535", c.VXLANPort)
	}
	if c.RouteProtocol < 5 || c.RouteProtocol > 255 {
		return nil, fmt.Errorf("invalid --route-protocol %d: want 5-255 (0-4 are the kernel's)", c.RouteProtocol)
	}
	if c.Resync < time.Second {
		return nil, fmt.Errorf("invalid --resync-period %s: want 1s or more", c.Resync)
	}
	if c.AntiSpoofPeriod < 100*time.Millisecond {
		return nil, fmt.Errorf("invalid --anti-spoof-period %s: want 100ms or more", c.AntiSpoofPeriod)
	}
	if c.MTU != 0 && (c.MTU < 576 || c.MTU > 65535) {
		return nil, fmt.Errorf("invalid --mtu %d: want 576-65535", c.MTU)
	}
	if c.VMHoldTime <= 0 {
		return nil, fmt.Errorf("invalid --vm-hold-time %s: must be positive", c.VMHoldTime)
	}
	if c.LeaseTime < time.Minute {
		return nil, fmt.Errorf("invalid --lease-time %s: want 1m or more", c.LeaseTime)
	}
	for _, s := range splitList(dns) {
		if _, err := netip.ParseAddr(s); err != nil {
			return nil, fmt.Errorf("invalid --dns %q: not an IP address", s)
		}
		c.DNS = append(c.DNS, s)
	}
	c.Search = splitList(search)
	if c.DHCPRangeText != "" {
		if !c.PodCIDR.IsValid() {
			// Checked against the podCIDR once the node has one.
			if _, _, ok := strings.Cut(c.DHCPRangeText, "-"); !ok {
				return nil, fmt.Errorf("invalid --dhcp-range %q: want FIRST-LAST", c.DHCPRangeText)
			}
		} else {
			p, err := leases.ParsePool(c.DHCPRangeText, c.PodCIDR)
			if err != nil {
				return nil, fmt.Errorf("invalid --dhcp-range: %w", err)
			}
			c.DHCPRange = &p
		}
	}
	if err := pf.ValidAnchor(c.PFAnchor); err != nil {
		return nil, fmt.Errorf("invalid --pf-anchor: %w", err)
	}
	for _, a := range []struct{ flag, v string }{{"--log-file", c.LogFile}, {"--pid-file", c.PidFile}} {
		if a.v != "" && !filepath.IsAbs(a.v) {
			return nil, fmt.Errorf("invalid %s %q: want an absolute path", a.flag, a.v)
		}
	}
	c.BootpdKeepClientID = !*ignoreCID
	for _, a := range []struct{ flag, v string }{{"--vmnet-plist", c.VmnetPlist}, {"--vmnet-network-file", c.VmnetNetworkFile}, {"--vmnet-state-file", c.VmnetStateFile}, {"--bootpd-plist", c.BootpdPlist}} {
		if a.v == "" || !filepath.IsAbs(a.v) {
			return nil, fmt.Errorf("invalid %s %q: want an absolute path", a.flag, a.v)
		}
	}
	for _, a := range []struct{ flag, v string }{{"--health-addr", c.HealthAddr}, {"--metrics-addr", c.MetricsAddr}} {
		if a.v != "" && !strings.Contains(a.v, ":") {
			return nil, fmt.Errorf("invalid %s %q: want host:port", a.flag, a.v)
		}
	}
	return c, nil
}

// fullModeOnly are the flags routes-only mode has no use for: the
// bridge, conflists, DHCP, leases, anti-spoofing, standalone mode, the
// pod subnet's NAT, and macOS's vmnet and pf.
var fullModeOnly = map[string]bool{
	"pod-cidr": true, "cluster-cidr": true, "masquerade": true, "route-services": true,
	"anti-spoof": true, "anti-spoof-period": true, "cni-conf-dir": true, "vm-cni-conf-dir": true, "cni-version": true,
	"bridge": true, "lease-file": true, "mtu": true, "lease-time": true, "vm-hold-time": true, "dns": true, "search": true, "domain": true, "dhcp-range": true,
	"vmnet-plist": true, "pf-anchor": true, "vmnet-network-file": true, "vmnet-state-file": true, "bootpd-plist": true, "bootpd-ignore-client-id": true,
}

// peerList is the repeatable --bgp-peer flag.
type peerList []bgp.Peer

func (l *peerList) String() string {
	var s []string
	for _, p := range *l {
		s = append(s, p.String())
	}
	return strings.Join(s, ",")
}

func (l *peerList) Set(v string) error {
	p, err := bgp.ParsePeer(v)
	if err != nil {
		return err
	}
	*l = append(*l, p)
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func main() { os.Exit(vmlaned(os.Args[1:])) }

// vmlaned is the daemon, returning its exit status rather than calling
// os.Exit, so that its deferred cleanups run on every way out: the pid
// file removed (else a log rotator may later signal a recycled pid), the
// log file closed.
func vmlaned(args []string) int {
	c, err := parseFlags(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmlaned:", err)
		return 2
	}
	var out io.Writer = os.Stderr
	var lf *logFile
	if c.LogFile != "" {
		if lf, err = openLogFile(c.LogFile); err != nil {
			fmt.Fprintln(os.Stderr, "vmlaned:", err)
			return 1
		}
		defer lf.Close()
		out = lf
	}
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: c.LogLevel}))
	if lf != nil {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		go reopenOn(hup, lf, log)
	}
	if c.PidFile != "" {
		if err := writePidFile(c.PidFile); err != nil {
			log.Error("writing the pid file", "file", c.PidFile, "err", err)
		}
		defer removePidFile(c.PidFile)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log.Info("vmlaned starting", "version", version.Version, "go", runtime.Version(), "platform", runtime.GOOS+"/"+runtime.GOARCH)
	if err := run(ctx, c, log); err != nil {
		log.Error("vmlaned stopped", "err", err)
		return 1
	}
	log.Info("vmlaned stopped; routes, rules and the bridge stay in place")
	return 0
}

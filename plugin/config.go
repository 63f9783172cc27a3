package plugin

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/vmlane/vmlane/internal/netaddr"
	"github.com/vmlane/vmlane/leases"
)

// The conflists vmlaned writes into the CNI config folder. ConflistName
// (network "vmlane", plain pods) sorts before most other plugins' files, so
// the CRI runtime picks it for ordinary pods. VMConflistName (network
// "vmlane-vm", "vm": true) sorts last, so the CRI runtime never picks it;
// a VM runtime loads it by name for its VM pods.
const (
	DefaultConfDir = "/etc/cni/net.d"
	ConflistName   = "10-vmlane.conflist"
	VMConflistName = "99-vmlane-vm.conflist"
)

// Defaults of the network config.
const (
	DefaultBridge    = "vmlane0"
	DefaultLeaseFile = leases.DefaultPath
	// DefaultLeaseTime is the DHCP lease a VM gets when the config says
	// nothing; the DHCP server in vmlaned uses the same default.
	DefaultLeaseTime = time.Hour
	// DefaultVMHoldTime is how long a VM's addresses stay held after its
	// pod goes, when the config sets no vmHoldTime (see
	// leases.DefaultVMHold for why a day).
	DefaultVMHoldTime = leases.DefaultVMHold
	minMTU            = 576 // RFC 791: every IPv4 host must take 576-byte datagrams
	maxMTU            = 65535
)

// DNS is the config's DNS section, as the CNI result carries it.
type DNS struct {
	Nameservers []string `json:"nameservers,omitempty"`
	Search      []string `json:"search,omitempty"`
	Domain      string   `json:"domain,omitempty"`
}

// NetConf is the vmlane network config (one entry of a conflist).
type NetConf struct {
	types.PluginConf
	Bridge  string `json:"bridge,omitempty"`
	Subnet  string `json:"subnet"`
	Gateway string `json:"gateway,omitempty"`
	// Subnet6 is the node's IPv6 pod CIDR on a dual-stack node; each
	// attachment then gets an address of it too. Gateway6 defaults to
	// its first address.
	Subnet6   string `json:"subnet6,omitempty"`
	Gateway6  string `json:"gateway6,omitempty"`
	MTU       int    `json:"mtu,omitempty"`
	LeaseFile string `json:"leaseFile,omitempty"`
	VM        bool   `json:"vm,omitempty"`
	// TapName names a VM attachment's TAP. Empty derives it from the pod
	// interface's name (TapFor), so that two attachments in one pod
	// never ask for the same TAP.
	TapName string `json:"tapName,omitempty"`
	// TapMultiQueue creates the TAP with IFF_MULTI_QUEUE, for runtimes
	// that open one queue per vCPU. Off by default: a runtime that opens a
	// multi-queue TAP without the flag gets EINVAL.
	TapMultiQueue bool `json:"tapMultiQueue,omitempty"`
	// TapOwner and TapGroup are the user and group that may open the TAP
	// without CAP_NET_ADMIN (TUNSETOWNER, TUNSETGROUP), for a runtime
	// whose QEMU runs unprivileged (KubeVirt's runs as 107): a number, or
	// a name looked up on the node. Unset is root (0).
	TapOwner json.RawMessage `json:"tapOwner,omitempty"`
	TapGroup json.RawMessage `json:"tapGroup,omitempty"`
	// PodMAC is the MAC of a VM attachment's pod interface: "random"
	// (the default: the kernel's) or "guest", the guest's own, for a
	// runtime that gives the guest the pod interface's MAC (KubeVirt's
	// tap binding, when the VMI names no MAC). The pod interface sends
	// nothing of its own, so the MAC still appears on the wire once.
	PodMAC string `json:"podMAC,omitempty"`
	DNS    DNS    `json:"dns,omitzero"`
	// AntiSpoof keeps each attachment to its own MAC and address on the
	// bridge (internal/antispoof). On unless set to false.
	AntiSpoof *bool `json:"antiSpoof,omitempty"`
	// PortMap says the conflist chains the reference portmap plugin
	// after vmlane (hostPort): GC, which portmap does not implement, has
	// portmap remove the mappings of each attachment it releases.
	PortMap bool `json:"portMap,omitempty"`
	// LeaseTime is the DHCP lease time vmlaned hands VMs of this network,
	// as a Go duration ("1h") or seconds.
	LeaseTime json.RawMessage `json:"leaseTime,omitempty"`
	// VMHoldTime is how long a VM's addresses and MAC (pods annotated
	// vmlane.io/vm) stay held after its pod goes, as a Go duration or
	// seconds; vmlaned writes its --vm-hold-time here.
	VMHoldTime json.RawMessage `json:"vmHoldTime,omitempty"`
	// ExcludeRange keeps CNI allocation out of vmlaned's DHCP dynamic
	// range ("FIRST-LAST"); vmlaned writes it into the conflist.
	ExcludeRange string `json:"excludeRange,omitempty"`
	// LogFile receives the plugin's log; empty means stderr. Never stdout,
	// which carries the result.
	LogFile  string `json:"logFile,omitempty"`
	LogLevel string `json:"logLevel,omitempty"`

	RuntimeConfig RuntimeConfig `json:"runtimeConfig,omitzero"`
	// ValidAttachments is what the runtime still uses, given to GC.
	ValidAttachments []Attachment `json:"cni.dev/valid-attachments,omitempty"`
}

// RuntimeConfig holds the capability arguments vmlane honours.
type RuntimeConfig struct {
	MAC string   `json:"mac,omitempty"`
	IPs []string `json:"ips,omitempty"`
	// PodAnnotations are the pod's annotations, which containerd and
	// CRI-O pass to a conflist that declares the capability
	// "io.kubernetes.cri.pod-annotations".
	PodAnnotations map[string]string `json:"io.kubernetes.cri.pod-annotations,omitempty"`
}

// The pod annotation that makes a pod a VM's ("vmlane.io/vm": NAME, the VM
// NAMESPACE/NAME) and the capability that carries it to the plugin.
const (
	VMAnnotation             = "vmlane.io/vm"
	PodAnnotationsCapability = "io.kubernetes.cri.pod-annotations"
	// MigrationTargetAnnotation marks a VM's pod as the live-migration
	// target of the VM's running pod, which it names ("NAME" in the
	// pod's namespace): without it, a pod of a VM that runs on another
	// node is refused (see Config.claimed).
	MigrationTargetAnnotation = "vmlane.io/migration-target"
)

// Attachment is an entry of cni.dev/valid-attachments.
type Attachment struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifname"`
}

// Config is a NetConf checked and with its defaults applied.
type Config struct {
	NetConf
	// Guard is AntiSpoof with its default applied.
	Guard        bool
	SubnetPrefix netip.Prefix
	GatewayAddr  netip.Addr
	// Subnet6Prefix and Gateway6Addr are zero on an IPv4-only network.
	Subnet6Prefix netip.Prefix
	Gateway6Addr  netip.Addr
	Exclude       leases.Pool
	Lease         time.Duration
	// VMHold is VMHoldTime with its default applied.
	VMHold time.Duration
	// VMName is the pod's vmlane.io/vm annotation (the VM's name in the
	// pod's namespace; Add checks it), empty for a pod that is no VM's.
	// A pod that has one is attached in VM mode (VM is true) whatever
	// the network says.
	VMName string
	// TapUID and TapGID are TapOwner and TapGroup as numbers.
	TapUID, TapGID uint32
	// MAC, IP and IP6 are the runtime's requests (zero when none).
	MAC string
	IP  netip.Addr
	IP6 netip.Addr
}

// DualStack reports whether the network gives IPv6 addresses too.
func (c *Config) DualStack() bool { return c.Subnet6Prefix.IsValid() }

// configError is a bad config field: CNI code 7 naming field and value.
func configError(field string, value any, why string) *types.Error {
	return types.NewError(types.ErrInvalidNetworkConfig,
		fmt.Sprintf("invalid %s %v: %s", field, quote(value), why), "")
}

func quote(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(v)
}

// ParseConfig decodes and validates a network config. defaultMTU is called
// only when the config sets no MTU (it looks at the host's default route).
func ParseConfig(stdin []byte, defaultMTU func() int) (*Config, error) {
	var n NetConf
	if err := json.Unmarshal(stdin, &n); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "parsing network config", err.Error())
	}
	c := &Config{NetConf: n}
	if c.Bridge == "" {
		c.Bridge = DefaultBridge
	}
	if err := checkIfName("bridge", c.Bridge); err != nil {
		return nil, err
	}
	c.Guard = c.AntiSpoof == nil || *c.AntiSpoof
	if c.TapName != "" {
		if err := checkIfName("tapName", c.TapName); err != nil {
			return nil, err
		}
	}
	switch c.PodMAC {
	case "", PodMACRandom, PodMACGuest:
	default:
		return nil, configError("podMAC", c.PodMAC, `must be "random" or "guest"`)
	}
	var err error
	if c.TapUID, err = parseID("tapOwner", c.TapOwner, lookupUser); err != nil {
		return nil, err
	}
	if c.TapGID, err = parseID("tapGroup", c.TapGroup, lookupGroup); err != nil {
		return nil, err
	}
	if c.LeaseFile == "" {
		c.LeaseFile = DefaultLeaseFile
	}
	if !strings.HasPrefix(c.LeaseFile, "/") {
		return nil, configError("leaseFile", c.LeaseFile, "must be an absolute path")
	}
	if c.Subnet == "" {
		return nil, configError("subnet", c.Subnet, "is required (the node's pod CIDR, e.g. 10.244.3.0/24)")
	}
	p, err := netip.ParsePrefix(c.Subnet)
	if err != nil {
		return nil, configError("subnet", c.Subnet, "not a CIDR")
	}
	if p != p.Masked() {
		return nil, configError("subnet", c.Subnet, fmt.Sprintf("has host bits set (did you mean %s?)", p.Masked()))
	}
	if !p.Addr().Is4() {
		return nil, configError("subnet", c.Subnet, "must be IPv4: VMs get their address by DHCPv4")
	}
	if p.Bits() > 30 {
		return nil, configError("subnet", c.Subnet, "is too small: a /30 is the smallest with a gateway and a host")
	}
	c.SubnetPrefix = p
	c.GatewayAddr = p.Addr().Next()
	if c.Gateway != "" {
		gw, err := netip.ParseAddr(c.Gateway)
		if err != nil {
			return nil, configError("gateway", c.Gateway, "not an IP address")
		}
		if !p.Contains(gw) {
			return nil, configError("gateway", c.Gateway, "is outside subnet "+c.Subnet)
		}
		if gw == p.Addr() || gw == netaddr.LastAddr(p) {
			return nil, configError("gateway", c.Gateway, "is the network or broadcast address of "+c.Subnet)
		}
		c.GatewayAddr = gw
	}
	if err := c.parseSubnet6(); err != nil {
		return nil, err
	}
	if c.MTU == 0 && defaultMTU != nil {
		c.MTU = defaultMTU()
	}
	if c.MTU == 0 {
		c.MTU = 1500
	}
	if c.MTU < minMTU || c.MTU > maxMTU {
		return nil, configError("mtu", c.MTU, fmt.Sprintf("out of range %d-%d", minMTU, maxMTU))
	}
	for _, ns := range c.DNS.Nameservers {
		if _, err := netip.ParseAddr(ns); err != nil {
			return nil, configError("dns.nameservers", ns, "not an IP address")
		}
	}
	if c.Lease, err = parseLeaseTime(c.LeaseTime); err != nil {
		return nil, configError("leaseTime", string(c.LeaseTime), err.Error())
	}
	if c.VMHold, err = parseHoldTime(c.VMHoldTime); err != nil {
		return nil, configError("vmHoldTime", string(c.VMHoldTime), err.Error())
	}
	if name, ok := c.RuntimeConfig.PodAnnotations[VMAnnotation]; ok {
		c.VMName, c.VM = name, true
	}
	if c.ExcludeRange != "" {
		if c.Exclude, err = leases.ParsePool(c.ExcludeRange, p); err != nil {
			return nil, configError("excludeRange", c.ExcludeRange, err.Error())
		}
	}
	if c.LogLevel != "" {
		if _, err := parseLevel(c.LogLevel); err != nil {
			return nil, configError("logLevel", c.LogLevel, err.Error())
		}
	}
	if m := c.RuntimeConfig.MAC; m != "" {
		if c.MAC, err = leases.NormalizeMAC(m); err != nil {
			return nil, configError("runtimeConfig.mac", m, "not a MAC address")
		}
		hw, _ := net.ParseMAC(c.MAC)
		if hw[0]&1 == 1 {
			return nil, configError("runtimeConfig.mac", m, "is a multicast address")
		}
		if c.MAC == "00:00:00:00:00:00" {
			return nil, configError("runtimeConfig.mac", m, "is the all-zero address")
		}
		if c.MAC == GatewayMAC {
			return nil, configError("runtimeConfig.mac", m, "is the MAC of vmlane's gateway, the node's bridge")
		}
	}
	for _, s := range c.RuntimeConfig.IPs {
		a, err := parseIPOrCIDR(s)
		if err != nil {
			return nil, configError("runtimeConfig.ips", s, "not an IP address")
		}
		if a = a.Unmap(); a.Is6() {
			if !c.DualStack() {
				continue // an IPv6 request is for another plugin of the chain
			}
			if err := c.requestIP6(s, a); err != nil {
				return nil, err
			}
			continue
		}
		if !p.Contains(a) {
			return nil, configError("runtimeConfig.ips", s, "is outside subnet "+c.Subnet)
		}
		if a == p.Addr() || a == netaddr.LastAddr(p) || a == c.GatewayAddr {
			return nil, configError("runtimeConfig.ips", s, "is the network, broadcast or gateway address of "+c.Subnet)
		}
		if c.IP.IsValid() {
			return nil, configError("runtimeConfig.ips", s, "asks for a second IPv4 address; vmlane gives one per attachment")
		}
		c.IP = a
	}
	return c, nil
}

// parseSubnet6 checks subnet6 and gateway6 (the IPv6 side of a dual-stack
// network): absent, or an IPv6 prefix of /64 to /120 and an address of it.
func (c *Config) parseSubnet6() error {
	if c.Subnet6 == "" {
		if c.Gateway6 != "" {
			return configError("gateway6", c.Gateway6, "needs subnet6")
		}
		return nil
	}
	p, err := netip.ParsePrefix(c.Subnet6)
	if err != nil {
		return configError("subnet6", c.Subnet6, "not a CIDR")
	}
	switch {
	case !p.Addr().Is6() || p.Addr().Is4In6():
		return configError("subnet6", c.Subnet6, "must be IPv6 (the IPv4 pod CIDR goes in subnet)")
	case p != p.Masked():
		return configError("subnet6", c.Subnet6, fmt.Sprintf("has host bits set (did you mean %s?)", p.Masked()))
	case p.Bits() < leases.MinSubnet6Bits:
		return configError("subnet6", c.Subnet6, fmt.Sprintf("is larger than /%d: a node's IPv6 pod CIDR is a /%d or smaller", leases.MinSubnet6Bits, leases.MinSubnet6Bits))
	case p.Bits() > leases.MaxSubnet6Bits:
		return configError("subnet6", c.Subnet6, fmt.Sprintf("is smaller than /%d", leases.MaxSubnet6Bits))
	}
	c.Subnet6Prefix, c.Gateway6Addr = p, p.Addr().Next()
	if c.Gateway6 != "" {
		gw, err := netip.ParseAddr(c.Gateway6)
		if err != nil {
			return configError("gateway6", c.Gateway6, "not an IP address")
		}
		if !p.Contains(gw) || gw == p.Addr() {
			return configError("gateway6", c.Gateway6, "is not a usable address of subnet6 "+c.Subnet6)
		}
		c.Gateway6Addr = gw
	}
	return nil
}

// requestIP6 takes a runtime's IPv6 request (s, parsed as a).
func (c *Config) requestIP6(s string, a netip.Addr) error {
	switch {
	case !c.Subnet6Prefix.Contains(a):
		return configError("runtimeConfig.ips", s, "is outside subnet6 "+c.Subnet6)
	case a == c.Subnet6Prefix.Addr() || a == c.Gateway6Addr:
		return configError("runtimeConfig.ips", s, "is the subnet-router anycast or gateway address of "+c.Subnet6)
	case c.IP6.IsValid():
		return configError("runtimeConfig.ips", s, "asks for a second IPv6 address; vmlane gives one per attachment")
	}
	c.IP6 = a
	return nil
}

func parseIPOrCIDR(s string) (netip.Addr, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Addr(), nil
	}
	return netip.ParseAddr(s)
}

func parseLeaseTime(raw json.RawMessage) (time.Duration, error) {
	d, set, err := parseDuration(raw, "1h")
	if !set || err != nil {
		return DefaultLeaseTime, err
	}
	// RFC 2131 leaves the range open; under a minute clients renew
	// constantly, and a lease time must fit in option 51's 32 bits.
	if d < time.Minute || d > 0xfffffffe*time.Second {
		return 0, fmt.Errorf("out of range 1m-%ds", uint32(0xfffffffe))
	}
	return d, nil
}

// parseDuration reads a Go duration string or a number of seconds; set is
// false when raw is absent or null. example goes into the error.
func parseDuration(raw json.RawMessage, example string) (d time.Duration, set bool, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, false, nil
	}
	var secs float64
	var s string
	switch {
	case json.Unmarshal(raw, &secs) == nil:
		return time.Duration(secs * float64(time.Second)), true, nil
	case json.Unmarshal(raw, &s) == nil:
		if d, err = time.ParseDuration(s); err == nil {
			return d, true, nil
		}
	}
	return 0, true, fmt.Errorf("not a duration (like %q) or seconds", example)
}

// parseHoldTime reads vmHoldTime: a Go duration or seconds, positive.
func parseHoldTime(raw json.RawMessage) (time.Duration, error) {
	d, set, err := parseDuration(raw, "24h")
	if !set || err != nil {
		return DefaultVMHoldTime, err
	}
	if d <= 0 {
		return 0, fmt.Errorf("must be positive: a VM's addresses are held for a while after its pod goes")
	}
	return d, nil
}

// checkIfName applies the kernel's rules for interface names.
func checkIfName(field, name string) error {
	switch {
	case len(name) > 15:
		return configError(field, name, "is longer than 15 bytes")
	case name == "." || name == "..":
		return configError(field, name, "is not a valid interface name")
	case name == "":
		return configError(field, name, "is empty")
	case strings.ContainsAny(name, "/: \t\n\v\f\r"):
		return configError(field, name, "contains '/', ':' or white space")
	case strings.Contains(name, "%"):
		// The kernel reads "%d" in a new link's name as a template.
		return configError(field, name, "contains '%'")
	}
	return nil
}

// K8sArgs are the CNI_ARGS vmlane reads.
type K8sArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE          types.UnmarshallableString //nolint:revive // CNI_ARGS names
	K8S_POD_NAME               types.UnmarshallableString //nolint:revive
	K8S_POD_UID                types.UnmarshallableString //nolint:revive
	K8S_POD_INFRA_CONTAINER_ID types.UnmarshallableString //nolint:revive
}

// ParseArgs parses CNI_ARGS. Unknown keys are an error unless
// IgnoreUnknown=true is among them, as the CNI conventions say.
func ParseArgs(args string) (leases.Pod, error) {
	var k K8sArgs
	if err := types.LoadArgs(args, &k); err != nil {
		return leases.Pod{}, types.NewError(types.ErrInvalidEnvironmentVariables, "invalid CNI_ARGS", err.Error())
	}
	return leases.Pod{
		Namespace: string(k.K8S_POD_NAMESPACE),
		Name:      string(k.K8S_POD_NAME),
		UID:       string(k.K8S_POD_UID),
	}, nil
}

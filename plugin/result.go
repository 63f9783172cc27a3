package plugin

import (
	"net"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// Link is what the result says of one interface.
type Link struct {
	Name    string
	MAC     string
	MTU     int
	Sandbox string // the netns path, for links inside the pod
}

// Attached is what ADD built, in the order the result lists it.
type Attached struct {
	Bridge, HostVeth, PodVeth Link
	// Tap is set for VM pods. Its MAC is the VM NIC's MAC (what the runtime
	// must give the guest), not the TAP's own.
	Tap *Link
}

// Result indices of the interfaces in BuildResult's output.
const (
	ifBridge = iota
	ifHostVeth
	ifPodVeth
	ifTap
)

// BuildResult renders the CNI result. The IP names the pod end of the
// veth, CNI_IFNAME, for VM pods too, where the guest behind the TAP holds
// the address: Kubernetes runtimes take the pod IP from the result's
// CNI_IFNAME interface only (containerd's CRI fails the sandbox with
// "failed to find network info for sandbox" when eth0 has no IP), so an
// IP on the TAP left every VM pod stuck in ContainerCreating. A VM runtime
// finds the TAP as the interface after the pod veth, named tapName, whose
// MAC is the guest's. The caller converts the result to the config's CNI
// version on output.
func BuildResult(c *Config, a Attached, ip, ip6 netip.Addr) *current.Result {
	r := &current.Result{CNIVersion: current.ImplementedSpecVersion}
	for _, l := range []Link{a.Bridge, a.HostVeth, a.PodVeth} {
		r.Interfaces = append(r.Interfaces, &current.Interface{Name: l.Name, Mac: l.MAC, Mtu: l.MTU, Sandbox: l.Sandbox})
	}
	if a.Tap != nil {
		r.Interfaces = append(r.Interfaces, &current.Interface{Name: a.Tap.Name, Mac: a.Tap.MAC, Mtu: a.Tap.MTU, Sandbox: a.Tap.Sandbox})
	}
	r.IPs = []*current.IPConfig{{
		Interface: current.Int(ifPodVeth),
		Address:   net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(c.SubnetPrefix.Bits(), 32)},
		Gateway:   c.GatewayAddr.AsSlice(),
	}}
	r.Routes = []*types.Route{{
		Dst: net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)},
		GW:  c.GatewayAddr.AsSlice(),
	}}
	// A dual-stack attachment lists its IPv6 address second, on the same
	// interface (a runtime takes the pod's IPs from CNI_IFNAME's), and
	// the IPv6 default route. Results of CNI 0.3.x and 0.4.0 carry both
	// too, each with its "version"; the conversion adds that.
	if ip6.IsValid() {
		r.IPs = append(r.IPs, &current.IPConfig{
			Interface: current.Int(ifPodVeth),
			Address:   net.IPNet{IP: ip6.AsSlice(), Mask: net.CIDRMask(c.Subnet6Prefix.Bits(), 128)},
			Gateway:   c.Gateway6Addr.AsSlice(),
		})
		r.Routes = append(r.Routes, &types.Route{
			Dst: net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)},
			GW:  c.Gateway6Addr.AsSlice(),
		})
	}
	r.DNS = types.DNS{Nameservers: c.DNS.Nameservers, Domain: c.DNS.Domain, Search: c.DNS.Search}
	return r
}

package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/vmlane/vmlane/leases"
)

// ClaimsFileName is the node's copy of the cluster's VMClaims that vmlaned
// keeps beside the lease file, for the plugin, which has no API access: a
// VM whose pod comes to this node gets the addresses its claim names.
const ClaimsFileName = "vmclaims.json"

// ClaimsFile is the content of ClaimsFileName (version 1).
type ClaimsFile struct {
	Version int         `json:"version"`
	Claims  []NodeClaim `json:"claims"`
}

// NodeClaim is one VMClaim as vmlaned copies it: the VM ("NAMESPACE/NAME"),
// its addresses with their home subnets' prefix lengths, its MAC, the node
// that holds them and the VM's pod there ("NAMESPACE/NAME", empty while
// none runs).
type NodeClaim struct {
	VM   string       `json:"vm"`
	IPv4 netip.Prefix `json:"ipv4"`
	IPv6 netip.Prefix `json:"ipv6,omitzero"`
	MAC  string       `json:"mac"`
	Node string       `json:"node"`
	Pod  string       `json:"pod,omitempty"`
	// Live says that Pod runs on another node than the copy's, which is
	// up (in the cluster and Ready): the VM runs there, and a pod of it
	// here must be its migration target.
	Live bool `json:"live,omitempty"`
}

// claimsPath is the claims file of the node whose lease file is leaseFile.
func claimsPath(leaseFile string) string {
	return filepath.Join(filepath.Dir(leaseFile), ClaimsFileName)
}

// vmClaim returns the claim of vm in the node's claims file; ok is false
// when there is none (or no file: vmlaned without the VMClaim CRD).
func vmClaim(leaseFile, vm string) (NodeClaim, bool, error) {
	data, err := os.ReadFile(claimsPath(leaseFile))
	if errors.Is(err, fs.ErrNotExist) {
		return NodeClaim{}, false, nil
	}
	if err != nil {
		return NodeClaim{}, false, err
	}
	var f ClaimsFile
	if err := json.Unmarshal(data, &f); err != nil {
		return NodeClaim{}, false, fmt.Errorf("%s: %w", claimsPath(leaseFile), err)
	}
	if f.Version != 1 {
		return NodeClaim{}, false, fmt.Errorf("%s: unsupported version %d", claimsPath(leaseFile), f.Version)
	}
	for _, c := range f.Claims {
		if c.VM == vm {
			return c, true, nil
		}
	}
	return NodeClaim{}, false, nil
}

// claimed puts into req the addresses and MAC the VM's claim names (the
// node's copy of the cluster's VMClaims), when it has one and the runtime
// asked for none: the VM's pod came to this node from another, or back
// here after its lease here ended. Addresses of another node's subnets
// move in (req.Home, req.Home6).
//
// A claim that names a live pod of the VM on another node (Live) is a VM
// running there: this pod gets its addresses only as that pod's
// migration target, which the runtime says with the pod annotation
// vmlane.io/migration-target naming the source pod. Any pod creator of the
// VM's namespace can annotate a pod vmlane.io/vm; without this, one would
// take a running VM's addresses and MAC, and with its first frame the
// VM's routes. target reports that the pod is such a target: its guest
// does not run here yet.
func (c *Config) claimed(req *leases.ReserveRequest) (target bool, err error) {
	cl, ok, err := vmClaim(c.LeaseFile, req.VMName)
	if err != nil {
		return false, types.NewError(types.ErrTryAgainLater, "reading the node's VM claims", err.Error())
	}
	if ok && cl.Live {
		if err := c.migrationTarget(req.Pod, cl); err != nil {
			return false, err
		}
		target = true
	}
	if !ok || req.IP.IsValid() || req.MAC != "" {
		return target, nil
	}
	req.IP, req.MAC = cl.IPv4.Addr(), cl.MAC
	if !c.SubnetPrefix.Contains(req.IP) {
		req.Home = cl.IPv4.Masked()
	}
	if cl.IPv6.IsValid() && c.DualStack() && !req.IP6.IsValid() {
		req.IP6 = cl.IPv6.Addr()
		if !c.Subnet6Prefix.Contains(req.IP6) {
			req.Home6 = cl.IPv6.Masked()
		}
	}
	return target, nil
}

// migrationTarget checks that pod is the migration target of the live pod
// of cl's VM: its vmlane.io/migration-target annotation names that pod
// ("NAME", or "NAMESPACE/NAME").
func (c *Config) migrationTarget(pod leases.Pod, cl NodeClaim) error {
	source, _ := c.RuntimeConfig.PodAnnotations[MigrationTargetAnnotation]
	ns, name, _ := strings.Cut(cl.Pod, "/")
	if source == cl.Pod || (source == name && ns == pod.Namespace) {
		return nil
	}
	why := fmt.Sprintf("VM %s runs as pod %s on node %s: a second pod of it gets its addresses only as that pod's live-migration target, annotated %s: %q",
		cl.VM, cl.Pod, cl.Node, MigrationTargetAnnotation, name)
	if source != "" {
		why = fmt.Sprintf("%s (this pod's %s names %q)", why, MigrationTargetAnnotation, source)
	}
	return types.NewError(types.ErrInvalidNetworkConfig, "invalid annotation "+VMAnnotation+" "+quote(c.VMName)+": "+why, "")
}

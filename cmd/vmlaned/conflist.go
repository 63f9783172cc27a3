package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/vmlane/vmlane/internal/atomicfile"
	"github.com/vmlane/vmlane/plugin"
)

// The conflists' names and roles: plugin.ConflistName, plugin.VMConflistName.
const (
	ConflistName   = plugin.ConflistName
	VMConflistName = plugin.VMConflistName
)

func conflistFile(vm bool) string {
	if vm {
		return VMConflistName
	}
	return ConflistName
}

// conflistParams is what the node's conflist is made of.
type conflistParams struct {
	Bridge  string
	Subnet  netip.Prefix
	Gateway netip.Addr
	// Subnet6 and Gateway6 are the IPv6 side of a dual-stack node; zero
	// on an IPv4-only one.
	Subnet6   netip.Prefix
	Gateway6  netip.Addr
	MTU       int
	LeaseFile string
	LeaseTime time.Duration
	// VMHoldTime is how long a VM's addresses stay held after its pod
	// goes (--vm-hold-time).
	VMHoldTime time.Duration
	DNS        []string
	Search     []string
	Domain     string
	Exclude    string // the DHCP dynamic range, kept out of CNI allocation
	VM         bool
	// NoAntiSpoof writes "antiSpoof": false (--anti-spoof=false).
	NoAntiSpoof bool
	// CNIVersion pins the conflist's cniVersion; "" (--cni-version=auto)
	// writes compatVersion with cniVersions naming every version vmlane
	// prefers, so each runtime takes the newest its libcni knows.
	CNIVersion string
}

// compatVersion is the cniVersion an auto conflist names, and
// preferredVersions its cniVersions. Runtimes whose libcni predates
// cniVersions (CNI spec 1.1; containerd 1.6 and 1.7, CRI-O before 1.31)
// read cniVersion alone, and reject a result of a version they do not
// know: containerd 1.6.20 fails ADD with `unsupported CNI result version
// "1.1.0"`. Newer libcni (containernetworking/cni v1.2+, containerd 2.x)
// takes the highest entry of cniVersions it supports, 1.1.0, which is the
// version that has STATUS and GC.
const compatVersion = "1.0.0"

var preferredVersions = []string{"1.0.0", "1.1.0"}

// autoCNIVersion is --cni-version's default.
const autoCNIVersion = "auto"

// renderConflist is a node's CNI config: one vmlane plugin with the node's
// subnet. Pure: golden tested.
func renderConflist(p conflistParams) ([]byte, error) {
	plugin := map[string]any{
		"type":       "vmlane",
		"bridge":     p.Bridge,
		"subnet":     p.Subnet.String(),
		"gateway":    p.Gateway.String(),
		"leaseFile":  p.LeaseFile,
		"leaseTime":  p.LeaseTime.String(),
		"vmHoldTime": p.VMHoldTime.String(),
		"vm":         p.VM,
		// The pod's annotations carry vmlane.io/vm, which makes a pod a
		// VM's (and attaches it in VM mode through either network).
		"capabilities": map[string]bool{"mac": true, "ips": true, plugin.PodAnnotationsCapability: true},
	}
	if p.Subnet6.IsValid() {
		plugin["subnet6"] = p.Subnet6.String()
		plugin["gateway6"] = p.Gateway6.String()
	}
	if p.MTU != 0 {
		plugin["mtu"] = p.MTU
	}
	if len(p.DNS)+len(p.Search) > 0 || p.Domain != "" {
		dns := map[string]any{}
		if len(p.DNS) > 0 {
			dns["nameservers"] = p.DNS
		}
		if len(p.Search) > 0 {
			dns["search"] = p.Search
		}
		if p.Domain != "" {
			dns["domain"] = p.Domain
		}
		plugin["dns"] = dns
	}
	if p.Exclude != "" {
		plugin["excludeRange"] = p.Exclude
	}
	if p.NoAntiSpoof {
		plugin["antiSpoof"] = false
	}
	name := "vmlane"
	if p.VM {
		name = "vmlane-vm"
	}
	// hostPort: the reference portmap plugin, chained after vmlane (the
	// DaemonSet installs it beside vmlane), DNATs each of the pod's
	// hostPorts to the pod's address, which for a VM pod is its guest's;
	// snat makes a pod reach its own hostPort, and the node reach one
	// bound to 127.0.0.1. portmap has no GC of its own: vmlane's GC has it
	// remove the mappings of the attachments it releases (portMap).
	plugin["portMap"] = true
	portmap := map[string]any{
		"type":         "portmap",
		"snat":         true,
		"capabilities": map[string]bool{"portMappings": true},
	}
	list := map[string]any{
		"cniVersion": p.CNIVersion,
		"name":       name,
		"plugins":    []any{plugin, portmap},
	}
	if p.CNIVersion == "" {
		list["cniVersion"] = compatVersion
		list["cniVersions"] = preferredVersions
	}
	out, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// writeConflist writes the conflist atomically (temp file, fsync, rename),
// and only when its content changes, so the runtime's file watch does not
// fire on every restart. It reports whether it wrote.
func writeConflist(dir, name string, data []byte) (bool, error) {
	path := filepath.Join(dir, name)
	if old, err := os.ReadFile(path); err == nil && string(old) == string(data) {
		return false, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	// atomicfile's temporary file sits in dir itself, not elsewhere: the
	// rename then raises an inotify event under the temporary name
	// (IN_MOVED_FROM) besides the one under the final name (IN_MOVED_TO).
	// containerd's CNI config watch ignores the latter (it skips "create"
	// events) and reloads on the former; a file moved in from elsewhere
	// would only be seen at the next unrelated change.
	if err := atomicfile.WriteFile(path, data, 0o644); err != nil {
		return false, fmt.Errorf("installing %s: %w", path, err)
	}
	// atomicfile fsyncs the folder too: without that a crash could bring
	// back the previous conflist, for the old subnet.
	return true, nil
}

// firstConflist is the network config a CRI runtime picks from dir: the
// first file, by name, ending in .conf, .conflist or .json (libcni's
// ConfFiles order; containerd and CRI-O use the first one unless told to
// load more). "" when there is none.
func firstConflist(dir string) (string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var names []string
	for _, e := range ents {
		switch filepath.Ext(e.Name()) {
		case ".conf", ".conflist", ".json":
			if !e.IsDir() {
				names = append(names, e.Name())
			}
		}
	}
	if len(names) == 0 {
		return "", nil
	}
	sort.Strings(names)
	return names[0], nil
}

// shadowedBy reports the other network's config that a runtime would use
// instead of vmlane's conflist name in dir ("" when vmlane's comes first):
// pods then get that network, and vmlane's leases and DHCP never see them.
func shadowedBy(dir, name string) (string, error) {
	first, err := firstConflist(dir)
	if err != nil || first == name || first == "" {
		return "", err
	}
	return first, nil
}

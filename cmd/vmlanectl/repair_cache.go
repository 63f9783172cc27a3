package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/vmlane/vmlane/leases"
	"github.com/vmlane/vmlane/plugin"
)

// cniCacheDir is libcni's default cache folder.
const cniCacheDir = "/var/lib/cni"

// cacheEntry is one vmlane attachment from the CNI result cache.
type cacheEntry struct {
	file        string // the cache file, for messages
	key         leases.Key
	netns       string
	pod         leases.Pod
	vm          bool
	antiSpoof   bool
	subnet      netip.Prefix
	gateway     netip.Addr
	subnet6     netip.Prefix // zero on an IPv4-only network
	gateway6    netip.Addr
	leaseFile   string
	ip          netip.Addr
	ip6         netip.Addr // the result's IPv6 address, on a dual-stack network
	mac         string
	networkName string
}

// cachedInfo is libcni's cache file (containernetworking/cni libcni,
// kind "cniCacheV1"), the fields vmlane reads.
type cachedInfo struct {
	Kind        string      `json:"kind"`
	ContainerID string      `json:"containerId"`
	Config      []byte      `json:"config"`
	IfName      string      `json:"ifName"`
	NetworkName string      `json:"networkName"`
	NetNS       string      `json:"netns"`
	CniArgs     [][2]string `json:"cniArgs"`
	Result      struct {
		Interfaces []struct {
			Name    string `json:"name"`
			Mac     string `json:"mac"`
			Sandbox string `json:"sandbox"`
		} `json:"interfaces"`
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	} `json:"result"`
}

// readCNICache reads the vmlane attachments from the cache folder's
// results. Files that are not vmlane's are skipped; vmlane's that do not
// parse are returned as problems, never fatal.
func readCNICache(dir string) (entries []cacheEntry, problems []string, err error) {
	results := filepath.Join(dir, "results")
	des, err := os.ReadDir(results)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading the CNI result cache: %w", err)
	}
	for _, de := range des {
		path := filepath.Join(results, de.Name())
		data, err := os.ReadFile(path)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", path, err))
			continue
		}
		e, ok, err := parseCacheEntry(data)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", path, err))
		}
		if ok {
			e.file = path
			entries = append(entries, e)
		}
	}
	return entries, problems, nil
}

// parseCacheEntry decodes one cache file; ok is false for another
// plugin's network.
func parseCacheEntry(data []byte) (e cacheEntry, ok bool, err error) {
	var ci cachedInfo
	if err := json.Unmarshal(data, &ci); err != nil {
		return e, false, nil // not a cache file vmlane can read; not vmlane's either
	}
	var conf struct {
		Plugins []json.RawMessage `json:"plugins"`
	}
	if json.Unmarshal(ci.Config, &conf) != nil || len(conf.Plugins) == 0 {
		// A single network config rather than a list.
		conf.Plugins = []json.RawMessage{ci.Config}
	}
	var raw json.RawMessage
	for _, r := range conf.Plugins {
		var n plugin.NetConf
		if json.Unmarshal(r, &n) == nil && n.Type == "vmlane" {
			raw = r
			break
		}
	}
	if raw == nil {
		return e, false, nil
	}
	c, err := plugin.ParseConfig(raw, func() int { return 1500 })
	if err != nil {
		return e, true, fmt.Errorf("the vmlane config in the cache: %v", err)
	}
	e = cacheEntry{
		key:         leases.Key{ContainerID: ci.ContainerID, IfName: ci.IfName},
		netns:       ci.NetNS,
		vm:          c.VM,
		antiSpoof:   c.Guard,
		subnet:      c.SubnetPrefix,
		gateway:     c.GatewayAddr,
		subnet6:     c.Subnet6Prefix,
		gateway6:    c.Gateway6Addr,
		leaseFile:   c.LeaseFile,
		networkName: ci.NetworkName,
	}
	for _, kv := range ci.CniArgs {
		switch kv[0] {
		case "K8S_POD_NAMESPACE":
			e.pod.Namespace = kv[1]
		case "K8S_POD_NAME":
			e.pod.Name = kv[1]
		case "K8S_POD_UID":
			e.pod.UID = kv[1]
		}
	}
	if len(ci.Result.IPs) == 0 {
		return e, true, errors.New("the cached result has no address")
	}
	p, err := netip.ParsePrefix(ci.Result.IPs[0].Address)
	if err != nil {
		return e, true, fmt.Errorf("the cached result's address %q: %v", ci.Result.IPs[0].Address, err)
	}
	e.ip = p.Addr()
	for _, a := range ci.Result.IPs[1:] {
		if p, err := netip.ParsePrefix(a.Address); err == nil && p.Addr().Is6() && c.DualStack() {
			e.ip6 = p.Addr()
		}
	}
	// The lease's MAC: a VM's is its TAP's entry (the guest NIC's), a
	// plain pod's its interface's.
	want := ci.IfName
	if c.VM {
		want = c.TapFor(ci.IfName)
	}
	for _, i := range ci.Result.Interfaces {
		if i.Name == want && i.Sandbox != "" {
			e.mac, err = leases.NormalizeMAC(i.Mac)
			if err != nil {
				return e, true, fmt.Errorf("the cached result's MAC %q: %v", i.Mac, err)
			}
		}
	}
	if e.mac == "" {
		return e, true, fmt.Errorf("the cached result has no interface %s in the pod", want)
	}
	return e, true, nil
}

// canonicalPath names the file at p as one string however p was spelled
// (relative, with // or .., through a symlink): absolute, clean, symlinks
// resolved, the folder's alone when the file does not exist (yet). Repair
// matches the CNI cache's lease files to --lease-file by it; by the
// spelling, every entry of a differently spelled path was left out and
// live pods' addresses given away.
func canonicalPath(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return filepath.Clean(p)
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		return r
	}
	if d, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		return filepath.Join(d, filepath.Base(abs))
	}
	return abs
}

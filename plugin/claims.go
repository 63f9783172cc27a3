package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
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
// its addresses with their home subnets' prefix lengths, its MAC, and the
// node that holds them.
type NodeClaim struct {
	VM   string       `json:"vm"`
	IPv4 netip.Prefix `json:"ipv4"`
	IPv6 netip.Prefix `json:"ipv6,omitzero"`
	MAC  string       `json:"mac"`
	Node string       `json:"node"`
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

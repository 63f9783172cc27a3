package main

import (
	"fmt"
	"strings"

	"github.com/vmlane/vmlane/internal/antispoof"
	"github.com/vmlane/vmlane/internal/bridge"
	"github.com/vmlane/vmlane/plugin"
)

// readNode reads the links on the bridge and the anti-spoofing table.
func readNode(bridgeName string) (nodeState, error) {
	ports, err := bridge.Ports(bridgeName)
	if err != nil {
		return nodeState{}, fmt.Errorf("reading the ports of bridge %s (--bridge): %w", bridgeName, err)
	}
	guarded, err := antispoof.Table{Name: plugin.AntiSpoofTable(bridgeName)}.Ports()
	if err != nil {
		return nodeState{}, err
	}
	n := nodeState{ports: map[string]bool{}, guarded: map[string]antispoof.Port{}}
	for p := range ports {
		if strings.HasPrefix(p, "vml") {
			n.ports[p] = true
		}
	}
	for _, g := range guarded {
		n.guarded[g.Name] = g
	}
	return n, nil
}

// Command vmlane is the vmlane CNI plugin (network config "type": "vmlane").
// The CRI runtime runs it with the CNI_* environment and the network config
// on stdin; see package plugin and docs/configuration.md.
package main

import (
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/vmlane/vmlane/plugin"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	skel.PluginMainFuncs(plugin.New().Funcs(), plugin.SupportedVersions, "vmlane CNI plugin "+version)
}

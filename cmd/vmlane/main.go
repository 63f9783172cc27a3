// Command vmlane is the vmlane CNI plugin (network config "type": "vmlane").
// The CRI runtime runs it with the CNI_* environment and the network config
// on stdin; see package plugin and docs/configuration.md.
//
// `vmlane --version` prints the release it was built from (package
// internal/version); so does the VERSION verb, as "vmlaneVersion".
package main

import (
	"fmt"
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/vmlane/vmlane/internal/version"
	"github.com/vmlane/vmlane/plugin"
)

func main() {
	// A runtime never passes arguments; a person asking for the version
	// does.
	if len(os.Args) == 2 && (os.Args[1] == "--version" || os.Args[1] == "-version") {
		fmt.Println(version.String("vmlane"))
		return
	}
	skel.PluginMainFuncs(plugin.New().Funcs(), plugin.VersionInfo(version.Version), "vmlane CNI plugin "+version.Version)
}

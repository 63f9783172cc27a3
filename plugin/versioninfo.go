package plugin

import (
	"encoding/json"
	"io"

	"github.com/containernetworking/cni/pkg/version"
)

// VersionInfo is what the plugin answers to the CNI VERSION verb: the spec
// versions it speaks (SupportedVersions) and, beside them, the vmlane
// release it was built from as "vmlaneVersion". The spec defines only
// cniVersion and supportedVersions; libcni and the runtimes decode those
// and ignore the rest, so an operator's `CNI_COMMAND=VERSION vmlane` (or a
// support script) tells which build a node runs.
func VersionInfo(release string) version.PluginInfo {
	return versionInfo{release: release}
}

type versionInfo struct{ release string }

func (v versionInfo) SupportedVersions() []string { return SupportedVersions.SupportedVersions() }

func (v versionInfo) Encode(w io.Writer) error {
	return json.NewEncoder(w).Encode(struct {
		CNIVersion        string   `json:"cniVersion"`
		SupportedVersions []string `json:"supportedVersions"`
		VmlaneVersion     string   `json:"vmlaneVersion"`
	}{version.Current(), v.SupportedVersions(), v.release})
}

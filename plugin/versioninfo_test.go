package plugin

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"

	"github.com/containernetworking/cni/pkg/version"
)

// The VERSION verb's answer decodes as libcni decodes it, and carries the
// release beside the spec versions.
func TestVersionInfo(t *testing.T) {
	var buf bytes.Buffer
	if err := VersionInfo("v0.4.0").Encode(&buf); err != nil {
		t.Fatal(err)
	}
	info, err := (&version.PluginDecoder{}).Decode(buf.Bytes())
	if err != nil {
		t.Fatalf("libcni's decoder: %v (%s)", err, buf.Bytes())
	}
	if want := SupportedVersions.SupportedVersions(); !slices.Equal(info.SupportedVersions(), want) {
		t.Errorf("supportedVersions = %v, want %v", info.SupportedVersions(), want)
	}
	var raw map[string]any
	if err := json.Unmarshal(buf.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	if raw["vmlaneVersion"] != "v0.4.0" || raw["cniVersion"] != version.Current() {
		t.Errorf("VERSION answer = %s, want cniVersion %s and vmlaneVersion v0.4.0", buf.Bytes(), version.Current())
	}
}

package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestEntrypointNamesWhatIsMissing: an image without iptables, or a bad
// VMLANE_IPTABLES_MODE, stops the entrypoint with a message that says so
// before it changes anything. (Its happy path switches the image's
// iptables alternatives, which the real-node e2e runs in the image.)
func TestEntrypointNamesWhatIsMissing(t *testing.T) {
	script, err := filepath.Abs("../../../manifests/image/entrypoint.sh")
	if err != nil {
		t.Fatal(err)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	cmd := exec.Command(sh, script, "true")
	cmd.Env = []string{"PATH=" + t.TempDir()} // nothing on PATH
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "iptables-nft is not in this image: vmlane needs Debian's iptables package") {
		t.Errorf("entrypoint without iptables: %v, %q", err, out)
	}
}

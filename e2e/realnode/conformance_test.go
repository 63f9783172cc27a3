//go:build e2e

package realnode

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmlane/vmlane/e2e/cluster"
	"github.com/vmlane/vmlane/internal/testing/privtest"
)

// conformanceImages are the test images of VMLANE_CONFORMANCE_DIR, which
// every node imports when it is set.
func conformanceImages() []string {
	dir := os.Getenv("VMLANE_CONFORMANCE_DIR")
	if dir == "" {
		return nil
	}
	tars, _ := filepath.Glob(filepath.Join(dir, "images", "*.tar"))
	return tars
}

// TestUpstreamConformance runs Kubernetes' own e2e.test against the
// cluster: the subset make test runs (cluster.ConformanceSubset), or with
// VMLANE_CONFORMANCE=full every [sig-network] conformance test and the
// Networking Granular Checks (make conformance). It prints the counts and
// each failure, and fails on any failure or when nothing ran.
func TestUpstreamConformance(t *testing.T) {
	dir := os.Getenv("VMLANE_CONFORMANCE_DIR")
	if dir == "" {
		privtest.Missing(t, "VMLANE_CONFORMANCE_DIR is not set: make conformance-tools builds e2e.test and its images (bash internal/testing/conformance/build.sh --print-dir .cache/conformance DIR)")
	}
	focus := cluster.ConformanceSubset
	if os.Getenv("VMLANE_CONFORMANCE") == "full" {
		focus = cluster.ConformanceFocus
	}
	logPath := "/tmp/vmlane-conformance.log"
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	skip, leftOut := cluster.ConformanceLeftOut(cluster.ConformanceSkip)
	r := c.RunConformance(t, dir, focus, skip, logf)
	var b strings.Builder
	fmt.Fprintf(&b, "%s; e2e.test's log: %s\n", r.Summary(), logPath)
	for _, s := range leftOut {
		fmt.Fprintf(&b, "  left out %s\n", s)
	}
	for _, name := range r.Failed {
		fmt.Fprintf(&b, "  FAILED  %s\n", name)
		lines := strings.Split(r.Failures[name], "\n")
		if len(lines) > 4 {
			lines = append(lines[:4], "...")
		}
		for _, l := range lines {
			fmt.Fprintf(&b, "          %s\n", strings.TrimRight(l, " "))
		}
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(&b, "  skipped %s\n", s)
	}
	fmt.Print(b.String())
	t.Log(b.String())
	if len(r.Failed) > 0 {
		t.Errorf("%d upstream conformance tests failed", len(r.Failed))
	}
	if len(r.Passed) == 0 {
		t.Error("no upstream conformance test passed: did any run?")
	}
}

package cluster

import (
	"reflect"
	"strings"
	"testing"
)

// A report in the form e2e.test writes (ginkgo's JUnit, no failure
// message attribute): failures and interruptions fail with what their
// text says, a spec that skipped itself counts with its reason, specs the
// focus left out and pending ones do not count, nor do suite nodes.
func TestReadJUnit(t *testing.T) {
	r, err := readJUnit("testdata/conformance")
	if err != nil {
		t.Fatal(err)
	}
	hostPort := "[sig-network] HostPort validates that there is no conflict between pods with same hostPort but different hostIP and protocol [LinuxOnly] [Conformance]"
	proxy := "[sig-network] Proxy version v1 should proxy through a service and a pod [Conformance]"
	if want := []string{hostPort, proxy}; !reflect.DeepEqual(r.Failed, want) {
		t.Errorf("failed = %q, want %q", r.Failed, want)
	}
	if want := []string{"[sig-network] Services should serve a basic endpoint from pods [Conformance]"}; !reflect.DeepEqual(r.Passed, want) {
		t.Errorf("passed = %q, want %q", r.Passed, want)
	}
	if want := []string{"[sig-network] Networking Granular Checks: Services should function for service endpoints using hostNetwork: Requires at least 2 nodes (not -1)"}; !reflect.DeepEqual(r.Skipped, want) {
		t.Errorf("skipped = %q, want %q", r.Skipped, want)
	}
	if m := r.Failures[hostPort]; !strings.HasPrefix(m, "[FAILED] Timed out after 300.000s.") || strings.Contains(m, "In [It]") {
		t.Errorf("HostPort's failure = %q, want the text before its location", m)
	}
	if m := r.Failures[proxy]; m != "interrupted: Interrupted by User" {
		t.Errorf("Proxy's failure = %q", m)
	}
	if got := r.Summary(); !strings.HasPrefix(got, "conformance: 1 passed, 2 failed, 1 skipped") {
		t.Errorf("summary = %q", got)
	}
	if _, err := readJUnit(t.TempDir()); err == nil {
		t.Error("a folder with no report read as a result")
	}
}

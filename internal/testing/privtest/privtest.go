// Package privtest gates tests that need root, network namespaces or tools
// from the host (ip, tc, qemu). Outside CI such a test skips with a message
// that says what is missing; with VMLANE_PRIVILEGED=require (set by
// `make test`) it fails instead, so a run that was meant to exercise the
// kernel cannot pass by skipping everything.
package privtest

import (
	"os"
	"os/exec"
	"testing"
)

// EnvRequire is the variable that turns skips into failures.
const EnvRequire = "VMLANE_PRIVILEGED"

// Required reports whether privileged tests must run rather than skip.
func Required() bool { return os.Getenv(EnvRequire) == "require" }

// Require skips (or, when Required, fails) t unless the process is root and
// every named command is on PATH.
func Require(t testing.TB, commands ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "this test needs root (network namespaces, links, qdiscs); run `make test` as root")
	}
	for _, c := range commands {
		if _, err := exec.LookPath(c); err != nil {
			Missing(t, "this test needs "+c+" on PATH; `make test` installs it")
		}
	}
}

// Missing skips t with why, or fails it when privileged tests are required.
func Missing(t testing.TB, why string) {
	t.Helper()
	if Required() {
		t.Fatalf("%s (%s=require: not skipping)", why, EnvRequire)
	}
	t.Skip(why)
}

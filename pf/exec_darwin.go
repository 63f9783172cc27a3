package pf

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"

	"golang.org/x/sys/unix"
)

// toolPaths pins the tools vmlane runs to the system's own copies, so
// neither launchd's PATH nor a tool of the same name earlier in it decides
// which program changes the routing table or pf.
var toolPaths = map[string]string{
	"pfctl":  "/sbin/pfctl",
	"route":  "/sbin/route",
	"sysctl": "/usr/sbin/sysctl",
}

// ExecRunner runs macOS's tools (pfctl, route, sysctl) as processes. It
// is the real commandRunner of this package and of the routes package's
// macOS table.
type ExecRunner struct{}

// Run runs argv with stdin as its input and returns its stdout and stderr
// together; a non-zero exit is an error carrying that output.
func (ExecRunner) Run(stdin string, argv ...string) (string, error) {
	if len(argv) == 0 {
		return "", fmt.Errorf("no command")
	}
	path, ok := toolPaths[argv[0]]
	if !ok {
		return "", fmt.Errorf("%s is not a tool vmlane runs", argv[0])
	}
	cmd := exec.Command(path, argv[1:]...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// ProductVersion is macOS's version ("15.6.1", "26.0"), from the
// kern.osproductversion sysctl; ModeFor reads it.
func ProductVersion() (string, error) {
	v, err := unix.Sysctl("kern.osproductversion")
	if err != nil {
		return "", fmt.Errorf("sysctl kern.osproductversion: %w", err)
	}
	return v, nil
}

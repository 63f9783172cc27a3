// Package command runs the system tools vmlane drives as processes
// (macOS's pfctl, route and sysctl; Linux's iptables-restore). It is the
// one home of the seam those callers share: a Runner shaped like
// tailscale's wgengine/router commandRunner, whose recording fakes sit
// beside each caller's tests, and Exec, the real one. It imports the
// standard library only.
package command

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// Runner runs a system tool: argv[0] is the tool's name, stdin its input
// (none when empty). It returns what the tool printed on stdout and stderr
// together (pfctl prints its enable token on stderr) and an error when the
// tool could not run or exited non-zero.
type Runner interface {
	Run(stdin string, argv ...string) (string, error)
}

// Exec runs tools as processes. Tools maps each tool's name to the path
// it runs from, so that neither launchd's PATH nor a program of the same
// name earlier in it decides which program changes the routing table or
// pf; a name not in Tools is refused. A nil Tools means MacTools.
type Exec struct {
	Tools map[string]string
}

// MacTools pins the tools vmlane runs on macOS to the system's own copies.
var MacTools = map[string]string{
	"pfctl":  "/sbin/pfctl",
	"route":  "/sbin/route",
	"sysctl": "/usr/sbin/sysctl",
	"pkill":  "/usr/bin/pkill",
}

// ErrUnknownTool is returned for a tool Exec does not know.
var ErrUnknownTool = errors.New("not a tool vmlane runs")

// Run runs argv with stdin as its input and returns its stdout and stderr
// together; a non-zero exit is an error carrying that output.
func (e Exec) Run(stdin string, argv ...string) (string, error) {
	if len(argv) == 0 {
		return "", errors.New("no command")
	}
	tools := e.Tools
	if tools == nil {
		tools = MacTools
	}
	path, ok := tools[argv[0]]
	if !ok {
		return "", fmt.Errorf("%s: %w", argv[0], ErrUnknownTool)
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

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/vmlane/vmlane/internal/version"
	"github.com/vmlane/vmlane/leases"
)

// Exit statuses, as the usage text documents them.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

func usage() string {
	return `Usage:
  vmlanectl leases list   [--lease-file FILE] [-o table|json]
  vmlanectl leases get    (--mac MAC | --ip IP) [--lease-file FILE] [-o table|json]
  vmlanectl leases wait   --mac MAC [--timeout DURATION] [--lease-file FILE] [-o table|json]
  vmlanectl leases export --cocoon PATH [--lease-file FILE]
  vmlanectl leases repair [--lease-file FILE] [--bridge NAME] [--cni-cache-dir DIR] [--subnet CIDR] [--dry-run] [--force]
  vmlanectl claims list    [--lease-file FILE] [-o table|json]
  vmlanectl claims release NAMESPACE/NAME [--lease-file FILE]
  vmlanectl teardown      [--route-protocol N] [--cni-conf-dir DIR] [--vm-cni-conf-dir DIR] [--bridge NAME] [--dry-run]
  vmlanectl version
  vmlanectl help

Commands:
  leases list    print every lease, sorted by IP
  leases get     print the live lease of a MAC, or the lease of an IP in any state
  leases wait    wait until MAC has a bound lease, then print it (the lease
                 file need not exist yet)
  leases export  write the live leases to PATH as cocoon-net's JSON array of
                 {mac, ip, expiry}, atomically
  leases repair  rebuild a damaged lease file from what is live on the node:
                 the runtime's CNI result cache, the links on the bridge, the
                 anti-spoofing table and what still parses of the file; the
                 damaged file is kept beside it (FILE.damaged-TIME)
  claims list    print the VMs (pods annotated vmlane.io/vm) whose addresses
                 and MAC the node holds: attached to a pod, or held since
                 their pod went, until their hold time ends
  claims release give back at once the addresses held for a VM whose pod
                 went (a VM deleted for good); an attached VM is refused
  teardown       remove what vmlane installed on this node: routes with its
                 protocol, its iptables chains, its conflists and the bridge;
                 nothing else (leases are kept)
  version        print the release, Go toolchain and platform (also --version)

Flags (before or after the command word):
  --lease-file FILE   vmlane's leases.json or macOS bootpd's dhcpd_leases, told
                      apart by content (default ` + leases.NodePath + `: the node's own,
                      bootpd's on macOS)
  -o table|json       output format (default table)
  --mac MAC           a 48-bit MAC in any common spelling (02:00:0a:f4:03:07,
                      2:0:a:f4:3:7, 02-00-0A-F4-03-07)
  --ip IP             an IPv4 or IPv6 address
  --timeout DURATION  how long wait waits, e.g. 30s or 5m (default 1m; 0 waits
                      forever)
  --cocoon PATH       the file export writes
  --bridge NAME       repair: the node bridge (default vmlane0)
  --cni-cache-dir DIR repair: libcni's cache folder (default /var/lib/cni)
  --subnet CIDR       repair: the node's pod CIDR, when the cache does not
                      say it
  --dry-run           repair: print what would be written, write nothing
  --force             repair: rewrite a file that reads fine

Exit status: 0 on success; 1 when the lease file is missing or unreadable, no
lease matches, or wait times out; 2 on a usage error.
`
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole CLI, minus the process: tests call it directly.
func run(args []string, stdout, stderr io.Writer) int {
	c := &cli{stdout: stdout, stderr: stderr, now: time.Now}
	return c.run(args)
}

// cli holds what a command writes to and the clock it judges expiry by, so
// that tests can pin "(expired)" in golden output.
type cli struct {
	stdout, stderr io.Writer
	now            func() time.Time
}

// usageError is a mistake in the command line: exit status 2 and a pointer
// to the usage, where any other error is a failure (status 1).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

func (c *cli) run(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(c.stderr, usage())
		return exitUsage
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "help", "-h", "-help", "--help":
		if len(rest) > 0 && rest[0] != "leases" && rest[0] != "claims" && rest[0] != "teardown" {
			return c.fail("vmlanectl help", usagef("no help on %q: the commands are: leases, claims, teardown", rest[0]))
		}
		fmt.Fprint(c.stderr, usage())
		return exitOK
	case "version", "-version", "--version":
		fmt.Fprintln(c.stdout, version.String("vmlanectl"))
		return exitOK
	case "leases":
		return c.runLeases(rest)
	case "claims":
		return c.runClaims(rest)
	case "teardown":
		return c.runTeardown(rest)
	default:
		return c.fail("vmlanectl", usagef("unknown command %q: the commands are: leases, claims, teardown, help", cmd))
	}
}

// fail reports err under prefix and returns the exit status it calls for.
func (c *cli) fail(prefix string, err error) int {
	fmt.Fprintf(c.stderr, "%s: %v\n", prefix, err)
	if ue := (*usageError)(nil); errors.As(err, &ue) {
		fmt.Fprintln(c.stderr, "Run 'vmlanectl help' for usage.")
		return exitUsage
	}
	return exitFail
}

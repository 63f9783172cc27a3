package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/vmlane/vmlane/internal/bench/benchns"
	"golang.org/x/sys/unix"
)

// names are dhcpbench's namespaces, vmlbench-<pid>-<tag>, and temp
// folders, dhcpbench-<pid>-*; cnibench's are vmlb-, netnstest's vmlt-: no
// sweep of one ever takes another's.
var names = benchns.Names{
	NSPrefix:  "vmlbench-",
	TmpPrefix: "dhcpbench-",
	Tag:       "dhcpbench",
	Runs:      "DHCP servers",
}

// config is the command line.
type config struct {
	vmlaned string
	dnsmasq string
	// kea4 and kea6 are ISC Kea's servers, held against as dnsmasq is;
	// empty leaves Kea out.
	kea4, kea6 string
	levels     []int
	n          int
	rounds     int
	warmup     int
	timeout    time.Duration
	busy       contention
	// family is 4 (DHCP DORA) or 6 (DHCPv6 SOLICIT to REPLY).
	family int
}

// subnetBase is where the bench's subnet starts: a /22 by default, wider
// when -n and -warmup need more addresses.
var subnetBase = netip.MustParseAddr("10.252.0.0")

func main() {
	if os.Getenv(vcpuEnv) != "" {
		runVCPU()
		return
	}
	var cfg config
	var levels string
	fs := flag.NewFlagSet("dhcpbench", flag.ContinueOnError)
	fs.StringVar(&cfg.vmlaned, "vmlaned", "", "the vmlaned binary (required)")
	fs.StringVar(&cfg.dnsmasq, "dnsmasq", "/usr/sbin/dnsmasq", "the dnsmasq binary")
	fs.StringVar(&cfg.kea4, "kea4", "/usr/sbin/kea-dhcp4", "ISC Kea's DHCP server (-family 4); empty leaves Kea out")
	fs.StringVar(&cfg.kea6, "kea6", "/usr/sbin/kea-dhcp6", "ISC Kea's DHCPv6 server (-family 6); empty leaves Kea out")
	fs.StringVar(&levels, "levels", "1,16,64", "clients in flight, comma-separated")
	fs.IntVar(&cfg.n, "n", 800, "timed exchanges per server and level")
	fs.IntVar(&cfg.rounds, "rounds", 4, "turns the servers take within each level")
	fs.IntVar(&cfg.warmup, "warmup", 32, "uncounted exchanges per turn before timing")
	fs.DurationVar(&cfg.timeout, "timeout", 2*time.Second, "how long each reply (OFFER, ACK) may take before the exchange counts as timed out")
	fs.IntVar(&cfg.family, "family", 4, "4: DHCP (DISCOVER to ACK); 6: DHCPv6 (SOLICIT to REPLY), the same servers on a dual-stack bridge")
	var busy string
	fs.StringVar(&busy, "contention", "none", "clients like guests on a busy node: none, socket (a socket per exchange), cpu (CPU burnt after each exchange), both")
	fs.DurationVar(&cfg.busy.burn, "burn", 2*time.Millisecond, "with -contention cpu or both: CPU each client burns after each exchange")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	var err error
	switch busy {
	case "none":
		cfg.busy.burn = 0
	case "socket":
		cfg.busy = contention{ownSocket: true}
	case "cpu":
	case "both":
		cfg.busy.ownSocket = true
	default:
		err = fmt.Errorf("-contention %q: want none, socket, cpu or both", busy)
	}
	if err == nil {
		cfg.levels, err = parseLevels(levels)
	}
	if err == nil && cfg.family != 4 && cfg.family != 6 {
		err = fmt.Errorf("-family %d: want 4 or 6", cfg.family)
	}
	if err != nil || cfg.vmlaned == "" || cfg.n < 1 || cfg.rounds < 1 || cfg.rounds > cfg.n || cfg.warmup < 0 || cfg.timeout <= 0 || fs.NArg() > 0 {
		if err != nil {
			fmt.Fprintln(os.Stderr, "dhcpbench:", err)
		}
		fmt.Fprintln(os.Stderr, "usage: dhcpbench -vmlaned BIN/vmlaned [-dnsmasq /usr/sbin/dnsmasq] [-kea4 /usr/sbin/kea-dhcp4] [-kea6 /usr/sbin/kea-dhcp6] [-family 4|6] [-levels 1,16,64] [-n 800] [-rounds 4] [-warmup 32] [-timeout 2s] [-contention none|socket|cpu|both]")
		os.Exit(2)
	}
	// A second signal kills at once (see Main); Pdeathsig takes the
	// servers along and the next run sweeps the namespaces.
	names.Main(func(ctx context.Context) error { return run(ctx, cfg, os.Stdout, os.Stderr) })
}

// run measures both servers and prints the table to out, progress to log.
// Whatever way it returns, it stops the servers and removes its
// namespaces and temp folder first.
func run(ctx context.Context, cfg config, out, log io.Writer) (err error) {
	kea := &cfg.kea4
	if cfg.family == 6 {
		kea = &cfg.kea6
	}
	for _, p := range []*string{&cfg.vmlaned, &cfg.dnsmasq, kea} {
		if p == kea && *p == "" {
			continue
		}
		if *p, err = benchns.Executable(*p, "server binary"); err != nil {
			return err
		}
	}
	version, err := exec.CommandContext(ctx, cfg.dnsmasq, "--version").Output()
	if err != nil {
		return fmt.Errorf("%s --version: %w", cfg.dnsmasq, err)
	}
	// "Dnsmasq version 2.90  Copyright ..."
	dnsmasqVersion := "dnsmasq"
	if f := strings.Fields(string(version)); len(f) >= 3 && f[1] == "version" {
		dnsmasqVersion += " " + f[2]
	}
	p, err := newPlan(subnetBase, cfg.warmup+1, cfg.n)
	if err != nil {
		return err
	}
	r, err := benchns.Start(names, log)
	if err != nil {
		return err
	}
	tmp := r.Tmp()
	b := &bench{cfg: cfg, plan: p, tmp: tmp, log: log, shown: map[string]bool{}}
	defer func() {
		cerr := errors.Join(b.close(), r.Close())
		if cerr == nil {
			fmt.Fprintln(log, "dhcpbench: cleaned up: no server, namespace or temp file left")
		}
		err = errors.Join(err, cerr)
	}()
	if err := b.setup(ctx, r); err != nil {
		return err
	}
	var ru0 unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru0)
	rs, err := b.measure(ctx)
	if err != nil {
		return err
	}
	var ru1 unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru1)
	total := 0
	for _, r := range rs {
		total += r.n()
	}
	self := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	fmt.Fprintf(log, "dhcpbench: load generator CPU %s per timed exchange (warm-ups included)\n", fmtMS(self/time.Duration(max(total, 1)), 3))

	var uts unix.Utsname
	unix.Uname(&uts)
	what, subnet := "DHCP DORA exchanges", p.subnet
	if cfg.family == 6 {
		what, subnet = "DHCPv6 exchanges (SOLICIT, ADVERTISE, REQUEST, REPLY)", p.subnet6
	}
	refs, against := []string{"dnsmasq"}, dnsmasqVersion
	if *kea != "" {
		refs, against = append(refs, "kea"), against+" and "+keaVersion(*kea)
	}
	fmt.Fprintf(out, "%s: vmlaned against %s, all in this run on one machine "+
		"(nproc %d, Linux %s), one server at a time on the same bridge; lease files on %s. "+
		"%d CNI reservations in %s, served by all; per server and level %d timed exchanges, "+
		"each a first bind of a MAC of its own, in %s taken in turn; a reply not in %s is a timeout. Clients: %s.\n\n",
		what, against,
		runtime.NumCPU(), unix.ByteSliceToString(uts.Release[:]), fsType(tmp),
		len(p.warm)+len(p.timed), subnet, cfg.n, plural(cfg.rounds, "round"), cfg.timeout, cfg.busy)
	return writeTable(out, rs, "vmlaned", refs, cfg.timeout)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// fsType names the file system under dir: fsync costs what it costs
// there, and both servers fsync their lease files.
func fsType(dir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "an unknown file system"
	}
	switch st.Type {
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.TMPFS_MAGIC:
		return "tmpfs (fsync costs nothing)"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlayfs"
	}
	return fmt.Sprintf("a file system of type %#x", st.Type)
}

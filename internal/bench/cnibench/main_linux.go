package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/vmlane/vmlane/internal/bench/benchns"
)

// names are cnibench's namespaces, vmlb-<pid>-<n>-<tag>, and temp
// folders, cnibench-<pid>-*; netnstest's are vmlt- and dhcpbench's
// vmlbench-, so no sweep of one ever takes another's.
var names = benchns.Names{
	NSPrefix:  "vmlb-",
	TmpPrefix: "cnibench-",
	Tag:       "cnibench",
	Runs:      "CNI plugins",
	Numbered:  true,
}

// config is the command line.
type config struct {
	vmlane      string
	ref         string
	floor       string
	n           int
	concurrency int
	warmup      int
	rounds      int
	churnIDs    int
	vmlaned     string
}

func main() {
	var cfg config
	fs := flag.NewFlagSet("cnibench", flag.ContinueOnError)
	fs.StringVar(&cfg.vmlane, "vmlane", "", "the vmlane plugin binary (required)")
	fs.StringVar(&cfg.ref, "ref", "", "folder holding the reference bridge and host-local binaries (required)")
	fs.StringVar(&cfg.floor, "floor", "", "the netlinkfloor plugin binary: adds the floor targets and their ratio table")
	fs.IntVar(&cfg.n, "n", 150, "timed ADD+DEL iterations per target and mode")
	fs.IntVar(&cfg.concurrency, "concurrency", 16, "workers of the concurrent mode, and pod namespaces per target")
	fs.IntVar(&cfg.warmup, "warmup", 5, "uncounted iterations per target before timing")
	fs.IntVar(&cfg.rounds, "rounds", 4, "turns the targets take within each mode")
	fs.IntVar(&cfg.churnIDs, "churn-ids", 64, "container IDs the same-IDs modes cycle through (a multiple of -concurrency)")
	fs.StringVar(&cfg.vmlaned, "vmlaned", "", "the vmlaned binary: adds the target vmlane+vmlaned, vmlane with vmlaned running beside it")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if cfg.vmlane == "" || cfg.ref == "" || cfg.n < 1 || cfg.concurrency < 1 || cfg.warmup < 0 || cfg.rounds < 1 || fs.NArg() > 0 ||
		cfg.churnIDs < 1 || cfg.churnIDs%cfg.concurrency != 0 {
		fmt.Fprintln(os.Stderr, "usage: cnibench -vmlane BIN/vmlane -ref DIR [-vmlaned BIN/vmlaned] [-floor BIN/netlinkfloor] [-n 150] [-concurrency 16] [-warmup 5] [-rounds 4] [-churn-ids 64]")
		os.Exit(2)
	}
	names.Main(func(ctx context.Context) error { return run(ctx, cfg, os.Stdout, os.Stderr) })
}

// run measures every target and prints the tables to out, progress to log.
// Whatever way it returns, it removes its namespaces and temp folder first.
func run(ctx context.Context, cfg config, out, log io.Writer) (err error) {
	r, err := benchns.Start(names, log)
	if err != nil {
		return err
	}
	defer func() {
		cerr := r.Close()
		if cerr == nil {
			fmt.Fprintln(log, "cnibench: cleaned up: no namespace or temp file left")
		}
		err = errors.Join(err, cerr)
	}()
	tmp := r.Tmp()
	binDir, err := linkPlugins(tmp, cfg)
	if err != nil {
		return err
	}
	var benches []*bench
	ts := targets()
	if cfg.vmlaned != "" {
		abs, err := benchns.Executable(cfg.vmlaned, "vmlaned binary")
		if err != nil {
			return err
		}
		ts = append(ts, daemonTarget(abs))
	}
	if cfg.floor != "" {
		ts = append(ts, floorTargets()...)
	}
	for _, t := range ts {
		b, err := newBench(ctx, t, tmp, binDir, r, cfg.concurrency)
		if err != nil {
			return err
		}
		benches = append(benches, b)
	}
	all, err := measure(ctx, benches, cfg, log)
	if err != nil {
		return err
	}
	if err := writeTable(out, all); err != nil {
		return err
	}
	fmt.Fprintln(out)
	if err := writeRatios(out, all, refName); err != nil {
		return err
	}
	if cfg.floor == "" {
		return nil
	}
	fmt.Fprintln(out)
	return writeFloorRatios(out, all)
}

// linkPlugins makes the folder libcni searches: vmlane, bridge and
// host-local, linked under the names the configs' "type" fields use,
// whatever the given binaries are called.
func linkPlugins(tmp string, cfg config) (string, error) {
	dir := filepath.Join(tmp, "bin")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	bins := map[string]string{
		"vmlane":     cfg.vmlane,
		"bridge":     filepath.Join(cfg.ref, "bridge"),
		"host-local": filepath.Join(cfg.ref, "host-local"),
	}
	if cfg.floor != "" {
		bins["netlinkfloor"] = cfg.floor
	}
	for name, src := range bins {
		abs, err := benchns.Executable(src, "plugin binary")
		if err != nil {
			return "", err
		}
		if err := os.Symlink(abs, filepath.Join(dir, name)); err != nil {
			return "", err
		}
	}
	return dir, nil
}

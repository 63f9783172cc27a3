package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
)

// config is the command line.
type config struct {
	vmlane      string
	ref         string
	n           int
	concurrency int
	warmup      int
	rounds      int
}

func main() {
	var cfg config
	fs := flag.NewFlagSet("cnibench", flag.ContinueOnError)
	fs.StringVar(&cfg.vmlane, "vmlane", "", "the vmlane plugin binary (required)")
	fs.StringVar(&cfg.ref, "ref", "", "folder holding the reference bridge and host-local binaries (required)")
	fs.IntVar(&cfg.n, "n", 150, "timed ADD+DEL iterations per target and mode")
	fs.IntVar(&cfg.concurrency, "concurrency", 16, "workers of the concurrent mode, and pod namespaces per target")
	fs.IntVar(&cfg.warmup, "warmup", 5, "uncounted iterations per target before timing")
	fs.IntVar(&cfg.rounds, "rounds", 4, "turns the targets take within each mode")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if cfg.vmlane == "" || cfg.ref == "" || cfg.n < 1 || cfg.concurrency < 1 || cfg.warmup < 0 || cfg.rounds < 1 || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: cnibench -vmlane BIN/vmlane -ref DIR [-n 150] [-concurrency 16] [-warmup 5] [-rounds 4]")
		os.Exit(2)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "cnibench: must run as root: it creates network namespaces and runs CNI plugins in them (try sudo make bench)")
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// After the first signal the default action returns, so a second
		// one kills at once; the next run sweeps what that leaves.
		<-ctx.Done()
		stop()
	}()
	if err := run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("interrupted: %w", err)
		}
		fmt.Fprintln(os.Stderr, "cnibench:", err)
		os.Exit(1)
	}
}

// run measures every target and prints the tables to out, progress to log.
// Whatever way it returns, it removes its namespaces and temp folder first.
func run(ctx context.Context, cfg config, out, log io.Writer) (err error) {
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("needs ip (iproute2) on PATH")
	}
	sweepStale(log)
	tmp, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", tmpPrefix, os.Getpid()))
	if err != nil {
		return err
	}
	nss := &nsSet{}
	defer func() {
		cerr := cleanup(nss, tmp)
		if cerr == nil {
			fmt.Fprintln(log, "cnibench: cleaned up: no namespace or temp file left")
		}
		err = errors.Join(err, cerr)
	}()
	binDir, err := linkPlugins(tmp, cfg)
	if err != nil {
		return err
	}
	var benches []*bench
	for _, t := range targets() {
		b, err := newBench(ctx, t, tmp, binDir, nss, cfg.concurrency)
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
	return writeRatios(out, all, refName)
}

// linkPlugins makes the folder libcni searches: vmlane, bridge and
// host-local, linked under the names the configs' "type" fields use,
// whatever the given binaries are called.
func linkPlugins(tmp string, cfg config) (string, error) {
	dir := filepath.Join(tmp, "bin")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	for name, src := range map[string]string{
		"vmlane":     cfg.vmlane,
		"bridge":     filepath.Join(cfg.ref, "bridge"),
		"host-local": filepath.Join(cfg.ref, "host-local"),
	} {
		abs, err := filepath.Abs(src)
		if err != nil {
			return "", err
		}
		fi, err := os.Stat(abs)
		if err != nil {
			return "", fmt.Errorf("plugin binary: %w", err)
		}
		if !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("plugin binary %s is not an executable file", src)
		}
		if err := os.Symlink(abs, filepath.Join(dir, name)); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// cleanup removes the namespaces and temp folder, then checks that none of
// this process's namespaces is left.
func cleanup(nss *nsSet, tmp string) error {
	errs := []error{nss.removeAll(), os.RemoveAll(tmp)}
	left, err := ownNamespaces()
	errs = append(errs, err)
	if len(left) > 0 {
		errs = append(errs, fmt.Errorf("namespaces left: %v", left))
	}
	return errors.Join(errs...)
}

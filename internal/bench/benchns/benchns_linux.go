package benchns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/containernetworking/plugins/pkg/ns"
)

// RunDir is where `ip netns` keeps named namespaces.
const RunDir = "/run/netns"

// Names are what one bench command calls what it makes. NSPrefix and
// TmpPrefix must differ from those of every other command (and of
// netnstest's vmlt-), and neither may be a prefix of another's: a stale
// sweep takes every name it starts with whose pid is gone.
type Names struct {
	// NSPrefix starts the name of every namespace, followed by the pid
	// of the run: "vmlb-".
	NSPrefix string
	// TmpPrefix starts the name of each run's temp folder, followed by
	// its pid: "cnibench-".
	TmpPrefix string
	// Tag starts every line written to the log or stderr: "cnibench".
	Tag string
	// Runs is what the command runs in its namespaces, for the message
	// that it must run as root: "CNI plugins".
	Runs string
	// Numbered puts a sequence number between the pid and the tag, for a
	// command that makes many namespaces of one tag:
	// <NSPrefix><pid>-<n>-<tag>. Without it, names are
	// <NSPrefix><pid>-<tag>, and each tag is used once.
	Numbered bool
}

// Main exits 1 unless the process runs as root; then it runs run under a
// context that the first SIGINT or SIGTERM cancels. After that first
// signal the default action returns, so a second one kills at once; the
// next run's [Start] sweeps what that leaves. When run fails, Main prints
// the error after the tag, marked as interrupted if a signal came, and
// exits 1.
func (n Names) Main(run func(ctx context.Context) error) {
	if os.Geteuid() != 0 {
		fmt.Fprintf(os.Stderr, "%s: must run as root: it creates network namespaces and runs %s in them (try sudo make bench)\n", n.Tag, n.Runs)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop()
	}()
	if err := run(ctx); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("interrupted: %w", err)
		}
		fmt.Fprintf(os.Stderr, "%s: %v\n", n.Tag, err)
		os.Exit(1)
	}
}

// SweepStale deletes what earlier runs left when they died before their
// cleanup ran (SIGKILL, a second ^C): their namespaces, with all they
// hold, and their temp folders. Only names whose pid is no longer a live
// process are touched, so a concurrent run keeps its own. It logs each
// deletion, and each failure, which it otherwise ignores.
func (n Names) SweepStale(log io.Writer) {
	if ents, err := os.ReadDir(RunDir); err == nil {
		for _, e := range ents {
			if rest, ok := strings.CutPrefix(e.Name(), n.NSPrefix); ok && ownerDead(rest) {
				if err := deleteNS(e.Name()); err != nil {
					fmt.Fprintf(log, "%s: removing stale namespace: %v\n", n.Tag, err)
					continue
				}
				fmt.Fprintf(log, "%s: removed stale namespace %s\n", n.Tag, e.Name())
			}
		}
	}
	if ents, err := os.ReadDir(os.TempDir()); err == nil {
		for _, e := range ents {
			if rest, ok := strings.CutPrefix(e.Name(), n.TmpPrefix); ok && e.IsDir() && ownerDead(rest) {
				path := filepath.Join(os.TempDir(), e.Name())
				if err := os.RemoveAll(path); err != nil {
					fmt.Fprintf(log, "%s: removing stale temp folder: %v\n", n.Tag, err)
					continue
				}
				fmt.Fprintf(log, "%s: removed stale temp folder %s\n", n.Tag, path)
			}
		}
	}
}

// ownerDead reports whether name, "<pid>-…", belongs to a process that is
// gone.
func ownerDead(name string) bool {
	pidStr, _, _ := strings.Cut(name, "-")
	pid, err := strconv.Atoi(pidStr)
	return err == nil && pid != os.Getpid() && syscall.Kill(pid, 0) != nil
}

// Own lists the namespaces of this process still present.
func (n Names) Own() ([]string, error) {
	ents, err := os.ReadDir(RunDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	own := fmt.Sprintf("%s%d-", n.NSPrefix, os.Getpid())
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), own) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// Executable returns the absolute path of path, an executable file: a
// binary the bench runs, which it names what in errors ("server binary").
func Executable(path, what string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s %s is not an executable file", what, path)
	}
	return abs, nil
}

// Run is one run of a bench command: its temp folder, and the namespaces
// it made, remembered until they are deleted so that every way out, an
// interrupted one included, can delete what is left.
type Run struct {
	names Names
	tmp   string
	mu    sync.Mutex
	seq   int
	live  map[string]*NS
}

// Start begins a run: it checks that ip (iproute2) is on PATH, sweeps what
// dead runs left (SweepStale) and makes the run's temp folder,
// <TmpPrefix><pid>-*. The caller must Close the run on every way out.
func Start(names Names, log io.Writer) (*Run, error) {
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, errors.New("needs ip (iproute2) on PATH")
	}
	names.SweepStale(log)
	tmp, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", names.TmpPrefix, os.Getpid()))
	if err != nil {
		return nil, err
	}
	return &Run{names: names, tmp: tmp, live: map[string]*NS{}}, nil
}

// Tmp is the run's temp folder.
func (r *Run) Tmp() string { return r.tmp }

// Create makes a namespace named after the run's pid and tag (see
// [Names]), with lo up.
func (r *Run) Create(ctx context.Context, tag string) (*NS, error) {
	n := r.next(tag)
	if out, err := exec.CommandContext(ctx, "ip", "netns", "add", n.Name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %w: %s", n.Name, err, out)
	}
	return n, n.IP(ctx, "link", "set", "lo", "up")
}

// next names the namespace Create makes and remembers it before it
// exists: an interrupt between `ip netns add` and the bookkeeping must
// not leak it.
func (r *Run) next(tag string) *NS {
	r.mu.Lock()
	defer r.mu.Unlock()
	name := fmt.Sprintf("%s%d-%s", r.names.NSPrefix, os.Getpid(), tag)
	if r.names.Numbered {
		r.seq++
		name = fmt.Sprintf("%s%d-%d-%s", r.names.NSPrefix, os.Getpid(), r.seq, tag)
	}
	n := &NS{Name: name, Path: filepath.Join(RunDir, name)}
	r.live[name] = n
	return n
}

// Close deletes every namespace not deleted yet, one already gone
// counting as deleted, and the temp folder, then checks that none of this
// process's namespaces is left. It takes no context: it runs after an
// interrupt too.
func (r *Run) Close() error {
	r.mu.Lock()
	var errs []error
	for name := range r.live {
		if err := deleteNS(name); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(r.live, name)
	}
	r.mu.Unlock()
	errs = append(errs, os.RemoveAll(r.tmp))
	left, err := r.names.Own()
	errs = append(errs, err)
	if len(left) > 0 {
		errs = append(errs, fmt.Errorf("namespaces left: %v", left))
	}
	return errors.Join(errs...)
}

func deleteNS(name string) error {
	out, err := exec.Command("ip", "netns", "del", name).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "No such file") {
		return fmt.Errorf("ip netns del %s: %w: %s", name, err, out)
	}
	return nil
}

// NS is a named network namespace.
type NS struct {
	// Name is the namespace's name, as `ip netns` knows it.
	Name string
	// Path is its file under RunDir.
	Path string
}

// IP runs `ip -n NAME args...`.
func (n *NS) IP(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", append([]string{"-n", n.Name}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip -n %s %s: %w: %s", n.Name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Do runs fn on an OS thread switched into the namespace. Programs that
// fn starts (libcni's plugin exec) inherit it: Go forks from the calling,
// locked thread.
func (n *NS) Do(fn func() error) error {
	return ns.WithNetNSPath(n.Path, func(ns.NetNS) error { return fn() })
}

// Command is bin run inside the namespace by `ip netns exec`, which execs
// it in place: the process's pid is the command's own, so signals reach
// it. It runs in a process group of its own, so a ^C at the terminal
// reaches the bench alone, which stops it in order; Pdeathsig takes it
// down with the bench even when the bench is killed outright.
func (n *NS) Command(bin string, args ...string) *exec.Cmd {
	cmd := exec.Command("ip", append([]string{"netns", "exec", n.Name, bin}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// Links returns the names of the namespace's links.
func (n *NS) Links(ctx context.Context) ([]string, error) {
	out, err := exec.CommandContext(ctx, "ip", "-n", n.Name, "-o", "link", "show").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("listing links of %s: %w: %s", n.Name, err, out)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		names = append(names, strings.SplitN(strings.TrimSuffix(f[1], ":"), "@", 2)[0])
	}
	return names, nil
}

// ProcMem returns the resident memory of process pid now and at its peak
// (VmRSS and VmHWM of /proc/PID/status), in MiB.
func ProcMem(pid int) (rss, hwm float64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[2] != "kB" {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "VmHWM:":
			hwm = kb / 1024
		}
	}
	if rss == 0 {
		return 0, 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	return rss, hwm, nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// nsPrefix starts the name of every namespace dhcpbench makes. cnibench's
// are vmlb-, netnstest's vmlt-: no sweep of one ever takes another's.
const nsPrefix = "vmlbench-"

// tmpPrefix starts the name of each run's temp folder, followed by its pid.
const tmpPrefix = "dhcpbench-"

// nsRunDir is where `ip netns` keeps named namespaces.
const nsRunDir = "/run/netns"

// netNS is a named network namespace.
type netNS struct {
	name string
	path string
}

// ip runs `ip -n NAME args...`.
func (n *netNS) ip(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", append([]string{"-n", n.name}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip -n %s %s: %w: %s", n.name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// command is bin run inside the namespace by `ip netns exec`, which execs
// it in place: the process's pid is the command's own, so signals reach
// it. It runs in a process group of its own, so a ^C at the terminal
// reaches dhcpbench alone, which stops it in order; Pdeathsig takes it
// down with dhcpbench even when dhcpbench is killed outright.
func (n *netNS) command(bin string, args ...string) *exec.Cmd {
	cmd := exec.Command("ip", append([]string{"netns", "exec", n.name, bin}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// nsSet makes namespaces and remembers them until they are removed, so that
// every exit path, an interrupted one included, can remove what is left.
type nsSet struct {
	mu   sync.Mutex
	live map[string]*netNS
}

// create makes vmlbench-<pid>-tag with lo up.
func (s *nsSet) create(ctx context.Context, tag string) (*netNS, error) {
	n := &netNS{name: fmt.Sprintf("%s%d-%s", nsPrefix, os.Getpid(), tag)}
	n.path = filepath.Join(nsRunDir, n.name)
	s.mu.Lock()
	if s.live == nil {
		s.live = map[string]*netNS{}
	}
	// Remembered before it exists: an interrupt between `ip netns add`
	// and the bookkeeping must not leak it.
	s.live[n.name] = n
	s.mu.Unlock()
	if out, err := exec.CommandContext(ctx, "ip", "netns", "add", n.name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %w: %s", n.name, err, out)
	}
	return n, n.ip(ctx, "link", "set", "lo", "up")
}

// removeAll deletes every namespace not removed yet; one already gone
// counts as deleted. It takes no context: cleanup runs after an interrupt
// too. Deleting the server namespace takes its bridge and veth with it.
func (s *nsSet) removeAll() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for name := range s.live {
		if err := deleteNS(name); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(s.live, name)
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

// ownNamespaces lists the namespaces of this process still present.
func ownNamespaces() ([]string, error) {
	ents, err := os.ReadDir(nsRunDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	own := fmt.Sprintf("%s%d-", nsPrefix, os.Getpid())
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), own) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// sweepStale deletes what earlier runs left when they died before their
// cleanup ran (SIGKILL, a second ^C): their namespaces, and with them any
// server still running inside (Pdeathsig has killed those), and their temp
// folders. Only names whose pid is no longer a live process are touched,
// so a concurrent run keeps its own.
func sweepStale(log io.Writer) {
	if ents, err := os.ReadDir(nsRunDir); err == nil {
		for _, e := range ents {
			if rest, ok := strings.CutPrefix(e.Name(), nsPrefix); ok && ownerDead(rest) {
				if err := deleteNS(e.Name()); err != nil {
					fmt.Fprintf(log, "dhcpbench: removing stale namespace: %v\n", err)
					continue
				}
				fmt.Fprintf(log, "dhcpbench: removed stale namespace %s\n", e.Name())
			}
		}
	}
	if ents, err := os.ReadDir(os.TempDir()); err == nil {
		for _, e := range ents {
			if rest, ok := strings.CutPrefix(e.Name(), tmpPrefix); ok && e.IsDir() && ownerDead(rest) {
				path := filepath.Join(os.TempDir(), e.Name())
				if err := os.RemoveAll(path); err != nil {
					fmt.Fprintf(log, "dhcpbench: removing stale temp folder: %v\n", err)
					continue
				}
				fmt.Fprintf(log, "dhcpbench: removed stale temp folder %s\n", path)
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

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

	"github.com/containernetworking/plugins/pkg/ns"
)

// nsPrefix starts the name of every namespace cnibench makes; netnstest's
// are vmlt-, so a bench and the privileged tests never sweep each other's.
const nsPrefix = "vmlb-"

// nsRunDir is where `ip netns` keeps named namespaces.
const nsRunDir = "/run/netns"

// netNS is a named network namespace.
type netNS struct {
	name string
	path string
}

// do runs fn on an OS thread switched into the namespace. Programs that fn
// starts (libcni's plugin exec) inherit it: Go forks from the calling,
// locked thread.
func (n *netNS) do(fn func() error) error {
	return ns.WithNetNSPath(n.path, func(ns.NetNS) error { return fn() })
}

// links returns the names of the namespace's links.
func (n *netNS) links(ctx context.Context) ([]string, error) {
	out, err := exec.CommandContext(ctx, "ip", "-n", n.name, "-o", "link", "show").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("listing links of %s: %w: %s", n.name, err, out)
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

// nsSet makes namespaces and remembers them until they are removed, so that
// every exit path, an interrupted one included, can remove what is left.
type nsSet struct {
	mu   sync.Mutex
	seq  int
	live map[string]*netNS
}

// create makes vmlb-<pid>-<n>-tag with lo up.
func (s *nsSet) create(ctx context.Context, tag string) (*netNS, error) {
	s.mu.Lock()
	s.seq++
	n := &netNS{name: fmt.Sprintf("%s%d-%d-%s", nsPrefix, os.Getpid(), s.seq, tag)}
	n.path = filepath.Join(nsRunDir, n.name)
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
	if out, err := exec.CommandContext(ctx, "ip", "-n", n.name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("setting lo up in %s: %w: %s", n.name, err, out)
	}
	return n, nil
}

// remove deletes namespaces; one that is already gone counts as deleted.
// It takes no context: cleanup must run after an interrupt too.
func (s *nsSet) remove(nss ...*netNS) error {
	var errs []error
	for _, n := range nss {
		if err := deleteNS(n.name); err != nil {
			errs = append(errs, err)
			continue
		}
		s.mu.Lock()
		delete(s.live, n.name)
		s.mu.Unlock()
	}
	return errors.Join(errs...)
}

// removeAll deletes every namespace not removed yet.
func (s *nsSet) removeAll() error {
	s.mu.Lock()
	var nss []*netNS
	for _, n := range s.live {
		nss = append(nss, n)
	}
	s.mu.Unlock()
	return s.remove(nss...)
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

// tmpPrefix starts the name of each run's temp folder, followed by its pid.
const tmpPrefix = "cnibench-"

// sweepStale deletes what earlier cnibench runs left when they died before
// their cleanup ran (SIGKILL, a second ^C): their vmlb- namespaces and
// their temp folders, which hold the lease files. Only names whose pid is
// no longer a live process are touched, so a concurrent run keeps its own.
func sweepStale(log io.Writer) {
	if ents, err := os.ReadDir(nsRunDir); err == nil {
		for _, e := range ents {
			if rest, ok := strings.CutPrefix(e.Name(), nsPrefix); ok && ownerDead(rest) {
				if err := deleteNS(e.Name()); err != nil {
					fmt.Fprintf(log, "cnibench: removing stale namespace: %v\n", err)
					continue
				}
				fmt.Fprintf(log, "cnibench: removed stale namespace %s\n", e.Name())
			}
		}
	}
	if ents, err := os.ReadDir(os.TempDir()); err == nil {
		for _, e := range ents {
			if rest, ok := strings.CutPrefix(e.Name(), tmpPrefix); ok && e.IsDir() && ownerDead(rest) {
				path := filepath.Join(os.TempDir(), e.Name())
				if err := os.RemoveAll(path); err != nil {
					fmt.Fprintf(log, "cnibench: removing stale temp folder: %v\n", err)
					continue
				}
				fmt.Fprintf(log, "cnibench: removed stale temp folder %s\n", path)
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

package cluster

// The cgroup v1 hierarchies a real node's processes live in: made at
// start, killed and removed at stop.

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupHierarchies are the mounted cgroup v1 hierarchies, as folders
// under /sys/fs/cgroup (cpu,cpuacct-style links are skipped: the
// hierarchy is reached under its own name as well).
func cgroupHierarchies() []string {
	ents, _ := os.ReadDir("/sys/fs/cgroup")
	var out []string
	for _, e := range ents {
		if !e.IsDir() || e.Name() == "unified" {
			continue
		}
		out = append(out, filepath.Join("/sys/fs/cgroup", e.Name()))
	}
	return out
}

// ownMemoryCgroup is this process's memory cgroup: the nodes' cgroups
// nest there, so what the nodes run stays within the memory this process
// is allowed.
func ownMemoryCgroup() (string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 && f[1] == "memory" {
			return strings.TrimPrefix(f[2], "/"), nil
		}
	}
	return "", errors.New("no cgroup v1 memory hierarchy: the real-node e2e needs cgroup v1 (hybrid) as on this machine")
}

// makeCgroups creates base and base/<sub> in every hierarchy. cpuset
// folders start with no CPUs and no memory nodes, where no task may go:
// each level gets its parent's.
func makeCgroups(base string, subs ...string) error {
	for _, h := range cgroupHierarchies() {
		dirs := []string{}
		parts := strings.Split(base, "/")
		for i := range parts {
			dirs = append(dirs, filepath.Join(parts[:i+1]...))
		}
		for _, s := range subs {
			dirs = append(dirs, filepath.Join(base, s))
		}
		for _, d := range dirs {
			p := filepath.Join(h, d)
			if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return fmt.Errorf("creating cgroup %s: %w", p, err)
			}
			if filepath.Base(h) != "cpuset" {
				continue
			}
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				if cur, _ := os.ReadFile(filepath.Join(p, f)); strings.TrimSpace(string(cur)) != "" {
					continue
				}
				v, err := os.ReadFile(filepath.Join(filepath.Dir(p), f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(p, f), v, 0o644); err != nil {
					return fmt.Errorf("%s: %w", filepath.Join(p, f), err)
				}
			}
		}
	}
	return nil
}

// killCgroup SIGKILLs every process under base (read from the memory
// hierarchy, where every one of them is) until none is left, then removes
// base's folders, deepest first, in every hierarchy.
func killCgroup(base string) {
	mem := filepath.Join("/sys/fs/cgroup/memory", base)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		pids := cgroupPids(mem)
		if len(pids) == 0 {
			break
		}
		for _, p := range pids {
			syscall.Kill(p, syscall.SIGKILL)
		}
	}
	for _, h := range cgroupHierarchies() {
		removeCgroupTree(filepath.Join(h, base))
		// And the parents makeCgroups made, where no other test uses
		// them (rmdir fails on a cgroup with tasks or children).
		for d := filepath.Dir(base); d != "." && d != "/"; d = filepath.Dir(d) {
			if syscall.Rmdir(filepath.Join(h, d)) != nil {
				break
			}
		}
	}
}

func cgroupPids(dir string) []int {
	var pids []int
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		data, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// removeCgroupTree rmdirs dir's sub-cgroups, then dir (cgroup folders go
// with rmdir, not unlink of their files).
func removeCgroupTree(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if e.IsDir() {
			removeCgroupTree(filepath.Join(dir, e.Name()))
		}
	}
	syscall.Rmdir(dir)
}

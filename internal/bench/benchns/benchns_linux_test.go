package benchns

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// deadPID returns the pid of a process that has exited and been reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skipf("running true: %v", err)
	}
	return cmd.Process.Pid
}

func TestOwnerDead(t *testing.T) {
	dead := deadPID(t)
	for _, tc := range []struct {
		name string
		want bool
	}{
		{fmt.Sprintf("%d-srv", os.Getpid()), false},
		{fmt.Sprintf("%d-3-pod", os.Getppid()), false},
		{fmt.Sprintf("%d-srv", dead), true},
		{fmt.Sprintf("%d-2-node", dead), true},
		{"srv", false},
		{"-srv", false},
	} {
		if got := ownerDead(tc.name); got != tc.want {
			t.Errorf("ownerDead(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestNames(t *testing.T) {
	pid := os.Getpid()
	plain := &Run{names: Names{NSPrefix: "vmlbench-"}, live: map[string]*NS{}}
	numbered := &Run{names: Names{NSPrefix: "vmlb-", Numbered: true}, live: map[string]*NS{}}
	for _, tc := range []struct {
		r    *Run
		tag  string
		want string
	}{
		{plain, "srv", fmt.Sprintf("vmlbench-%d-srv", pid)},
		{plain, "load", fmt.Sprintf("vmlbench-%d-load", pid)},
		{numbered, "node", fmt.Sprintf("vmlb-%d-1-node", pid)},
		{numbered, "pod", fmt.Sprintf("vmlb-%d-2-pod", pid)},
		{numbered, "pod", fmt.Sprintf("vmlb-%d-3-pod", pid)},
	} {
		n := tc.r.next(tc.tag)
		if n.Name != tc.want || n.Path != filepath.Join(RunDir, tc.want) {
			t.Errorf("next(%q) = %+v, want name %s", tc.tag, *n, tc.want)
		}
		if tc.r.live[tc.want] != n {
			t.Errorf("next(%q): %s not remembered before it exists", tc.tag, tc.want)
		}
	}
}

// TestSweepStaleTemp checks the temp-folder half of the sweep, which needs
// no root: only folders of the prefix whose pid is gone are deleted.
func TestSweepStaleTemp(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	dead := deadPID(t)
	n := Names{NSPrefix: "benchnstest-never-", TmpPrefix: "benchnstest-", Tag: "benchnstest"}
	stale := fmt.Sprintf("benchnstest-%d-123", dead)
	keep := []string{
		fmt.Sprintf("benchnstest-%d-456", os.Getpid()), // this run's
		fmt.Sprintf("otherbench-%d-789", dead),         // another command's
		"benchnstest-x-1",                              // no pid
	}
	for _, d := range append([]string{stale}, keep...) {
		if err := os.Mkdir(filepath.Join(tmp, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var log strings.Builder
	n.SweepStale(&log)
	if _, err := os.Stat(filepath.Join(tmp, stale)); !os.IsNotExist(err) {
		t.Errorf("stale folder %s not deleted (stat: %v)", stale, err)
	}
	for _, d := range keep {
		if _, err := os.Stat(filepath.Join(tmp, d)); err != nil {
			t.Errorf("folder %s: %v, want it kept", d, err)
		}
	}
	if want := fmt.Sprintf("benchnstest: removed stale temp folder %s\n", filepath.Join(tmp, stale)); log.String() != want {
		t.Errorf("log = %q, want %q", log.String(), want)
	}
}

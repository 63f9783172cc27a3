package main

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestMain runs the test binary as the pause program itself when
// TestStopSignals starts it so.
func TestMain(m *testing.M) {
	if os.Getenv("VMLANE_PAUSE_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// TestStopSignals: SIGTERM (the kubelet's stop) and SIGINT end pause with
// status 0, and nothing else does.
func TestStopSignals(t *testing.T) {
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
	}{
		{"SIGTERM", syscall.SIGTERM},
		{"SIGINT", syscall.SIGINT},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "VMLANE_PAUSE_MAIN=1")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			// Still running after a SIGCHLD and a moment: it waits.
			time.Sleep(200 * time.Millisecond)
			cmd.Process.Signal(syscall.SIGCHLD)
			select {
			case err := <-done:
				t.Fatalf("pause exited before a stop signal: %v", err)
			case <-time.After(300 * time.Millisecond):
			}
			cmd.Process.Signal(tc.sig)
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("after %s: %v, want exit status 0", tc.name, err)
				}
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				t.Fatalf("pause still running 10s after %s", tc.name)
			}
		})
	}
}

// TestReap: children that exited are waited for, so none stays a zombie.
func TestReap(t *testing.T) {
	var pids []int
	for range 3 {
		cmd := exec.Command("/bin/sh", "-c", "exit 3")
		if err := cmd.Start(); err != nil {
			t.Skipf("no /bin/sh: %v", err)
		}
		pids = append(pids, cmd.Process.Pid)
	}
	deadline := time.Now().Add(10 * time.Second)
	n := 0
	for n < len(pids) && time.Now().Before(deadline) {
		n += reap()
		time.Sleep(10 * time.Millisecond)
	}
	if n != len(pids) {
		t.Fatalf("reaped %d children, want %d", n, len(pids))
	}
	for _, pid := range pids {
		if _, err := syscall.Wait4(pid, nil, syscall.WNOHANG, nil); !errors.Is(err, syscall.ECHILD) {
			t.Errorf("child %d: wait4 says %v, want ECHILD (already reaped)", pid, err)
		}
	}
}

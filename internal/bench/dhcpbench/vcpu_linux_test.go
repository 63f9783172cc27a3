package main

import (
	"os"
	"testing"
	"time"
)

// TestMain lets the test binary serve as a vcpu process, as dhcpbench's
// own binary does.
func TestMain(m *testing.M) {
	if os.Getenv(vcpuEnv) != "" {
		runVCPU()
		return
	}
	os.Exit(m.Run())
}

// TestVCPUBurns: a burn returns once the vcpu process has burnt the time
// asked for, and not before; closing ends the processes.
func TestVCPUBurns(t *testing.T) {
	vs, err := startVCPUs(2)
	if err != nil {
		t.Fatal(err)
	}
	const d = 20 * time.Millisecond
	for _, v := range vs {
		start := time.Now()
		if err := v.burn(d); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < d {
			t.Errorf("burn of %v returned after %v", d, took)
		}
	}
	if err := closeVCPUs(vs); err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		select {
		case <-v.done:
		default:
			t.Error("a vcpu process still runs after closeVCPUs")
		}
	}
}

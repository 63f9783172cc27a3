package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// vcpuEnv, set in dhcpbench's own environment, makes it a vcpu process
// instead of the bench (see runVCPU).
const vcpuEnv = "DHCPBENCH_VCPU"

// vcpu is the CPU of one busy guest: a process of its own that burns CPU
// when its client asks, as a guest's stack does on its own vCPU thread.
// The burn must not run on the load generator's goroutines: there a
// burning client holds one of the load generator's few Ps (GOMAXPROCS,
// the cores) until it is done, and the goroutines that read replies and
// send the next request queue behind it, so the clients' turnaround, not
// the server, made the tail, and the faster a server answered, the more
// clients were burning at once and the longer that queue was. A process
// is scheduled by the kernel against the servers' threads and the load
// generator's alike, as a guest's vCPU thread is on a real node.
type vcpu struct {
	cmd  *exec.Cmd
	in   io.WriteCloser // burn requests: a duration, 8 bytes
	out  io.ReadCloser  // one byte back per burn done
	ack  [1]byte
	dur  [8]byte
	done chan struct{} // closed when the process has exited
}

// startVCPUs starts n vcpu processes: this program again, in vcpu mode.
// They die with dhcpbench (Pdeathsig) and end when their input closes.
func startVCPUs(n int) ([]*vcpu, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding dhcpbench's own binary for the guests' CPUs: %w", err)
	}
	var vs []*vcpu
	for range n {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), vcpuEnv+"=1", "GOMAXPROCS=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		cmd.Stderr = os.Stderr
		v := &vcpu{cmd: cmd, done: make(chan struct{})}
		if v.in, err = cmd.StdinPipe(); err == nil {
			v.out, err = cmd.StdoutPipe()
		}
		if err == nil {
			err = cmd.Start()
		}
		if err != nil {
			closeVCPUs(vs)
			return nil, fmt.Errorf("starting a guest CPU process: %w", err)
		}
		go func() { cmd.Wait(); close(v.done) }()
		vs = append(vs, v)
	}
	return vs, nil
}

// burn has v burn d of CPU and returns when it is done. The caller waits
// on a pipe, holding none of the load generator's Ps meanwhile.
func (v *vcpu) burn(d time.Duration) error {
	binary.LittleEndian.PutUint64(v.dur[:], uint64(d))
	if _, err := v.in.Write(v.dur[:]); err != nil {
		return fmt.Errorf("guest CPU process: %w", err)
	}
	if _, err := io.ReadFull(v.out, v.ack[:]); err != nil {
		return fmt.Errorf("guest CPU process: %w", err)
	}
	return nil
}

// closeVCPUs ends the processes and waits for them.
func closeVCPUs(vs []*vcpu) error {
	var errs []error
	for _, v := range vs {
		v.in.Close()
	}
	for _, v := range vs {
		select {
		case <-v.done:
		case <-time.After(5 * time.Second):
			v.cmd.Process.Kill()
			<-v.done
			errs = append(errs, errors.New("a guest CPU process did not end when its input closed; killed"))
		}
	}
	return errors.Join(errs...)
}

// runVCPU is a vcpu process: for each duration read from stdin it burns
// that much CPU, then writes one byte to stdout; it returns at EOF.
func runVCPU() {
	runtime.GOMAXPROCS(1)
	var dur [8]byte
	for {
		if _, err := io.ReadFull(os.Stdin, dur[:]); err != nil {
			return
		}
		spin(time.Duration(binary.LittleEndian.Uint64(dur[:])))
		if _, err := os.Stdout.Write([]byte{1}); err != nil {
			return
		}
	}
}

package testvm

import (
	"bytes"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"syscall"
)

// startProcess starts argv with its stdout as the returned console stream.
func startProcess(argv []string) (io.Reader, process, fmt.Stringer, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	// QEMU reads the serial console's input from stdin: give it /dev/null.
	cmd.Stdin = nil
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	// If the test binary dies (a go test -timeout panic, say), take QEMU
	// with it rather than leave it holding the TAP and the namespace.
	// Pdeathsig follows the forking thread, not the process (golang/go#27505);
	// the Go runtime keeps its threads, so that does not bite here.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, nil, err
	}
	return stdout, cmdProcess{cmd}, stderr, nil
}

// cmdProcess adapts a started *exec.Cmd to process.
type cmdProcess struct{ cmd *exec.Cmd }

func (p cmdProcess) Wait() error { return p.cmd.Wait() }
func (p cmdProcess) Kill() error { return p.cmd.Process.Kill() }

// syncBuffer is a bytes.Buffer safe for exec's copying goroutine and
// readers of a running VM's Result.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer // guarded by mu
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

package testvm

import (
	"fmt"
	"io"
	"os/exec"
	"syscall"

	"github.com/vmlane/vmlane/internal/testing/syncbuf"
)

// startProcess starts argv with its stdout as the returned console stream
// and its stdin as the console's input.
func startProcess(argv []string) (console io.Reader, input io.Writer, proc process, stderr fmt.Stringer, err error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	// QEMU's stdio chardev feeds stdin to the guest's serial port. The pipe
	// stays open until Wait closes it, so the guest never sees an end of
	// input.
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	errBuf := &syncbuf.Buffer{}
	cmd.Stderr = errBuf
	// If the test binary dies (a go test -timeout panic, say), take QEMU
	// with it rather than leave it holding the TAP and the namespace.
	// Pdeathsig follows the forking thread, not the process (golang/go#27505);
	// the Go runtime keeps its threads, so that does not bite here.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		in.Close()
		return nil, nil, nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		// Start closes the pipes it made when it fails.
		return nil, nil, nil, nil, err
	}
	return stdout, in, cmdProcess{cmd}, errBuf, nil
}

// cmdProcess adapts a started *exec.Cmd to process.
type cmdProcess struct{ cmd *exec.Cmd }

func (p cmdProcess) Wait() error { return p.cmd.Wait() }
func (p cmdProcess) Kill() error { return p.cmd.Process.Kill() }

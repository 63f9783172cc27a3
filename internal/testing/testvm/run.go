package testvm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"
)

// maxConsole caps the console text kept in a Result; a quiet guest prints
// a few hundred bytes, so hitting it means something is spewing.
const maxConsole = 1 << 20

// process is the part of a started *exec.Cmd that a VM drives; tests stand
// in a fake.
type process interface {
	// Wait waits for the process to exit, like exec.Cmd.Wait.
	Wait() error
	// Kill kills the process, like os.Process.Kill.
	Kill() error
}

// VM is a running guest, returned by [Guest.Start].
type VM struct {
	cfg    Config
	start  time.Time
	proc   process
	stderr fmt.Stringer

	exited chan struct{} // closed once the console hit EOF and Wait returned

	// cmd is a one-slot semaphore that runs a held guest's commands one
	// at a time (a mutex that a context can give up on). Its holder may
	// write input and use nextID.
	cmd    chan struct{}
	input  io.Writer // QEMU's stdin: the serial console's input
	nextID int

	mu       sync.Mutex
	changed  chan struct{}    // guarded by mu: closed and replaced on each report
	res      Result           // guarded by mu
	console  strings.Builder  // guarded by mu
	stopped  bool             // guarded by mu: Stop asked for the kill
	killedBy error            // guarded by mu: why watch killed QEMU
	err      error            // guarded by mu: set before exited is closed
	replies  map[string]reply // guarded by mu: VMLANE-REPLY by id, until taken
}

// Run boots the guest with cfg and waits for it to power off. The error
// reports QEMU failing, a timeout or ctx ending, or the guest stopping
// without VMLANE-DONE; what the guest itself found (pings that failed,
// VMLANE-ERROR lines) is in the Result, which is returned whenever QEMU
// started. Use [Guest.Start] for Hold guests.
func (g Guest) Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Hold {
		return nil, errors.New("testvm: Run with Hold would never return; use Start and Stop")
	}
	vm, err := g.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return vm.Wait()
}

// Start boots the guest with cfg and returns at once. QEMU is killed when
// ctx ends, when cfg.Timeout passes, or by [VM.Stop]; the caller must see
// to one of those (t.Cleanup(func() { vm.Stop() }) in a test).
func (g Guest) Start(ctx context.Context, cfg Config) (*VM, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		return nil, fmt.Errorf("testvm: %w (install qemu-system-x86, or run `make guest`, which does)", err)
	}
	start := time.Now()
	console, input, proc, stderr, err := startProcess(g.command(cfg))
	if err != nil {
		return nil, fmt.Errorf("testvm: starting qemu: %w", err)
	}
	vm := newVM(cfg, start, console, input, proc, stderr)
	go vm.watch(ctx)
	return vm, nil
}

// newVM starts reading the console of an already started process, whose
// serial input is input.
func newVM(cfg Config, start time.Time, console io.Reader, input io.Writer, proc process, stderr fmt.Stringer) *VM {
	vm := &VM{
		cfg:     cfg,
		start:   start,
		proc:    proc,
		stderr:  stderr,
		exited:  make(chan struct{}),
		cmd:     make(chan struct{}, 1),
		input:   input,
		changed: make(chan struct{}),
		replies: map[string]reply{},
	}
	// The guest a migration brings was held on its source, and its
	// VMLANE-HOLD went to the source's console.
	vm.res.Held = cfg.Incoming != ""
	go vm.read(console)
	return vm
}

// Config returns the configuration the guest runs with, defaults filled in
// (the MAC address picked, for one).
func (vm *VM) Config() Config { return vm.cfg }

// read parses the console until EOF, then reaps QEMU.
func (vm *VM) read(console io.Reader) {
	r := bufio.NewReader(console)
	for {
		line, err := r.ReadString('\n')
		if line != "" {
			vm.line(strings.TrimRight(line, "\r\n"))
		}
		if err != nil {
			break
		}
	}
	werr := vm.proc.Wait()

	vm.mu.Lock()
	vm.err = vm.exitErrorLocked(werr)
	vm.mu.Unlock()
	close(vm.exited)
}

// line records one console line.
func (vm *VM) line(line string) {
	at := time.Since(vm.start)
	ev, ok := parseLine(line)

	vm.mu.Lock()
	if vm.console.Len() < maxConsole {
		vm.console.WriteString(line + "\n")
	}
	if ok && ev.kind == kindReply {
		if r, err := parseReply(ev); err != nil {
			vm.res.Errors = append(vm.res.Errors, fmt.Sprintf("parsing %q: %v", ev.String(), err))
		} else {
			vm.replies[r.id] = r
		}
	}
	if ok {
		vm.res.apply(ev, at)
		close(vm.changed)
		vm.changed = make(chan struct{})
	}
	vm.mu.Unlock()
}

// exitErrorLocked says why QEMU exited, nil if it was asked to. Needs vm.mu.
func (vm *VM) exitErrorLocked(waitErr error) error {
	switch {
	case vm.stopped:
		return nil
	case vm.killedBy != nil:
		return fmt.Errorf("testvm: %w%s", vm.killedBy, vm.tailLocked())
	case waitErr != nil:
		return fmt.Errorf("testvm: qemu: %w%s", waitErr, vm.tailLocked())
	case !vm.res.Done:
		// With panic=-1 and -no-reboot a panicking guest exits cleanly.
		return fmt.Errorf("testvm: guest stopped without VMLANE-DONE%s", vm.tailLocked())
	}
	return nil
}

// tailLocked is the end of the console and QEMU's stderr, to make an error
// self-explanatory. Needs vm.mu.
func (vm *VM) tailLocked() string {
	lines := strings.Split(strings.TrimRight(vm.console.String(), "\n"), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	s := "\n--- console (tail) ---\n" + strings.Join(lines, "\n")
	if e := strings.TrimSpace(vm.stderr.String()); e != "" {
		s += "\n--- qemu stderr ---\n" + e
	}
	return s
}

// watch kills QEMU when ctx ends or the timeout passes.
func (vm *VM) watch(ctx context.Context) {
	timer := time.NewTimer(vm.cfg.Timeout)
	defer timer.Stop()
	var why error
	select {
	case <-vm.exited:
		return
	case <-ctx.Done():
		why = fmt.Errorf("stopped guest: %w", context.Cause(ctx))
	case <-timer.C:
		why = fmt.Errorf("guest still running after %v: %w", vm.cfg.Timeout, context.DeadlineExceeded)
	}
	vm.mu.Lock()
	if !vm.stopped {
		vm.killedBy = why
	}
	vm.mu.Unlock()
	vm.proc.Kill()
}

// Ready waits until the guest has configured its NIC (VMLANE-READY) and
// returns what it reported so far: the address in Net, and for DHCP the
// lease. A guest whose DHCP failed is still ready, with DHCP nil and an
// entry in Errors. Ready fails if the guest exits first or ctx ends.
func (vm *VM) Ready(ctx context.Context) (*Result, error) {
	return vm.WaitFor(ctx, "VMLANE-READY", func(r *Result) bool { return r.Ready })
}

// Held waits until a Hold guest has finished its own pings (VMLANE-HOLD);
// from then on it takes commands ([VM.Ping], [VM.Fetch]).
func (vm *VM) Held(ctx context.Context) (*Result, error) {
	return vm.WaitFor(ctx, "VMLANE-HOLD", func(r *Result) bool { return r.Held })
}

// WaitFor waits until cond holds for the guest's reports so far, checking
// after each report, and returns them. what names the condition in errors.
// It fails if the guest sends its last report (VMLANE-HOLD or VMLANE-DONE)
// or QEMU exits first, or ctx ends.
func (vm *VM) WaitFor(ctx context.Context, what string, cond func(*Result) bool) (*Result, error) {
	for {
		vm.mu.Lock()
		res := vm.resultLocked()
		changed := vm.changed
		vm.mu.Unlock()
		if cond(res) {
			return res, nil
		}
		if res.Held || res.Done {
			// The guest's last report: nothing it says now can change cond.
			return res, fmt.Errorf("testvm: waiting for %s: guest finished without it%s", what, guestErrors(res))
		}
		select {
		case <-changed:
		case <-vm.exited:
			res := vm.Result()
			if cond(res) {
				return res, nil
			}
			err := vm.exitErr()
			if err == nil {
				err = errors.New("testvm: guest stopped")
			}
			return res, fmt.Errorf("waiting for %s: %w", what, err)
		case <-ctx.Done():
			return vm.Result(), fmt.Errorf("testvm: waiting for %s: %w", what, context.Cause(ctx))
		}
	}
}

// guestErrors formats the guest's own errors for an error message.
func guestErrors(r *Result) string {
	if len(r.Errors) == 0 {
		return ""
	}
	return " (" + strings.Join(r.Errors, "; ") + ")"
}

// Wait waits for QEMU to exit and returns the guest's reports; see
// [Guest.Run] for the error.
func (vm *VM) Wait() (*Result, error) {
	<-vm.exited
	return vm.Result(), vm.exitErr()
}

// Stop kills QEMU unless it has exited already and waits for it. A stopped
// Hold guest is a success: the error is only for failures before Stop.
// Stop may be called more than once.
func (vm *VM) Stop() (*Result, error) {
	vm.mu.Lock()
	select {
	case <-vm.exited:
	default:
		if vm.killedBy == nil {
			vm.stopped = true
		}
	}
	vm.mu.Unlock()
	// Killing a process that has just exited is harmless: os.Process
	// tracks that itself and returns os.ErrProcessDone.
	vm.proc.Kill()
	return vm.Wait()
}

func (vm *VM) exitErr() error {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.err
}

// Result returns a snapshot of what the guest has reported so far.
func (vm *VM) Result() *Result {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.resultLocked()
}

// resultLocked is Result for callers holding vm.mu.
func (vm *VM) resultLocked() *Result {
	res := vm.res
	res.Console = vm.console.String()
	res.Stderr = vm.stderr.String()
	res.Pings = slices.Clone(res.Pings)
	res.Errors = slices.Clone(res.Errors)
	res.DHCPEvents = slices.Clone(res.DHCPEvents)
	return &res
}

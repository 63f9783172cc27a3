package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Runner is a testing.TB for code that is not a test: the demo, and the
// suite's TestMain, which builds the cluster every test shares. The
// helpers it drives (internal/testing/netnstest, internal/testing/controlplane) register
// their teardown with Cleanup and report with Fatal, as in a test; Run
// turns a Fatal into an error and Close runs the cleanups, newest first.
//
// Only the methods those helpers call are provided; the embedded nil
// testing.TB only satisfies the interface's unexported method, so calling
// any other method panics, which a new caller finds at once.
type Runner struct {
	testing.TB

	name string
	log  io.Writer
	ctx  context.Context

	mu       sync.Mutex
	cleanups []func() // guarded by mu
	failed   bool     // guarded by mu
	tmp      []string // guarded by mu
}

// NewRunner returns a Runner that logs to log and whose Context is ctx.
func NewRunner(ctx context.Context, name string, log io.Writer) *Runner {
	return &Runner{name: name, log: log, ctx: ctx}
}

// fatal is the panic value of Fatal, recovered by Run.
type fatal struct{ msg string }

// Run calls fn and returns the message of a Fatal (or Skip) inside it as an
// error. Fatal stops fn as it stops a test, but by panicking, so it must
// be called on the goroutine that called Run.
func (r *Runner) Run(fn func()) (err error) {
	defer func() {
		if v := recover(); v != nil {
			f, ok := v.(fatal)
			if !ok {
				panic(v)
			}
			err = errors.New(f.msg)
		}
	}()
	fn()
	return nil
}

// Close runs the registered cleanups, newest first, once.
func (r *Runner) Close() {
	for {
		r.mu.Lock()
		n := len(r.cleanups)
		if n == 0 {
			tmp := r.tmp
			r.tmp = nil
			r.mu.Unlock()
			for _, d := range tmp {
				os.RemoveAll(d)
			}
			return
		}
		fn := r.cleanups[n-1]
		r.cleanups = r.cleanups[:n-1]
		r.mu.Unlock()
		// A cleanup that calls Fatal must not stop the others.
		if err := r.Run(fn); err != nil {
			fmt.Fprintf(r.log, "cleanup: %v\n", err)
		}
	}
}

// Helper is a no-op: there is no test output to attribute lines to.
func (r *Runner) Helper() {}

// Name names the run (namespaces and logs carry it).
func (r *Runner) Name() string { return r.name }

// Context is the Runner's context.
func (r *Runner) Context() context.Context { return r.ctx }

// Cleanup registers fn to run at Close.
func (r *Runner) Cleanup(fn func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, fn)
}

// Failed reports whether Error or Fatal was called.
func (r *Runner) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

// Log and Logf write a line to the Runner's log.
func (r *Runner) Log(args ...any) { fmt.Fprintln(r.log, args...) }

// Logf writes a formatted line to the Runner's log.
func (r *Runner) Logf(format string, args ...any) { fmt.Fprintf(r.log, format+"\n", args...) }

// Error logs and marks the run failed.
func (r *Runner) Error(args ...any) { r.fail(); r.Log(args...) }

// Errorf logs and marks the run failed.
func (r *Runner) Errorf(format string, args ...any) { r.fail(); r.Logf(format, args...) }

// Env returns the environment variable name, which `make e2e` sets; a
// suite cannot run without it.
func (r *Runner) Env(name string) string {
	v := os.Getenv(name)
	if v == "" {
		r.Fatal(name + " is not set: `make e2e` sets it")
	}
	return v
}

// Fatal marks the run failed and stops the caller (see Run).
func (r *Runner) Fatal(args ...any) { r.fail(); r.stop(fmt.Sprint(args...)) }

// Fatalf marks the run failed and stops the caller (see Run).
func (r *Runner) Fatalf(format string, args ...any) { r.fail(); r.stop(fmt.Sprintf(format, args...)) }

// Skip stops the caller: outside a test, a missing prerequisite is an error.
func (r *Runner) Skip(args ...any) { r.fail(); r.stop(fmt.Sprint(args...)) }

// TempDir returns a new directory removed at Close.
func (r *Runner) TempDir() string {
	d, err := os.MkdirTemp("", "vmlane-"+r.name+"-")
	if err != nil {
		r.Fatalf("TempDir: %v", err)
	}
	r.mu.Lock()
	r.tmp = append(r.tmp, d)
	r.mu.Unlock()
	return d
}

func (r *Runner) fail() {
	r.mu.Lock()
	r.failed = true
	r.mu.Unlock()
}

func (r *Runner) stop(msg string) {
	panic(fatal{msg})
}

// SuiteMain is a suite's TestMain: it builds the cluster every test shares
// with setup (through a Runner named name), runs the tests, tears the
// cluster down, and prints how long the build and the whole took. An
// interrupt (Ctrl-C, SIGTERM) tears the cluster down before the process
// goes; what a test made itself dies with it (namespaces are swept by the
// next run, processes have Pdeathsig). It returns the exit code.
func SuiteMain(m *testing.M, name string, setup func(r *Runner)) int {
	start := time.Now()
	r := NewRunner(context.Background(), name, os.Stderr)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "%s: %v: tearing the cluster down\n", name, s)
		r.Close()
		os.Exit(130)
	}()
	code := 1
	if err := r.Run(func() { setup(r) }); err != nil {
		fmt.Fprintf(os.Stderr, "%s: building the cluster failed: %v\n", name, err)
	} else {
		fmt.Printf("%s: cluster up in %s\n", name, time.Since(start).Round(time.Second))
		code = m.Run()
	}
	signal.Stop(sig)
	r.Close()
	fmt.Printf("%s: total %s\n", name, time.Since(start).Round(time.Second))
	return code
}

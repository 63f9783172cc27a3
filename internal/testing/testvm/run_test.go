package testvm

import (
	"bufio"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeQEMU stands in for the QEMU process: the test writes its console,
// reads the console input the VM sends, and decides how it exits.
type fakeQEMU struct {
	console *io.PipeWriter
	input   *io.PipeReader // the VM writes its commands to the other end
	inLines *bufio.Reader  // input, by line
	exit    chan error     // Wait's result; buffered, sent once
	once    sync.Once
	kill    sync.Once
	killed  chan struct{} // closed by the first Kill
}

func (p *fakeQEMU) Wait() error { return <-p.exit }

func (p *fakeQEMU) Kill() error {
	p.end(errors.New("signal: killed"))
	p.kill.Do(func() { close(p.killed) })
	return nil
}

// end closes the console and makes Wait return err, once.
func (p *fakeQEMU) end(err error) {
	p.once.Do(func() {
		p.console.Close()
		p.input.CloseWithError(errors.New("write |1: broken pipe"))
		p.exit <- err
	})
}

func (p *fakeQEMU) print(t *testing.T, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if _, err := io.WriteString(p.console, l+"\r\n"); err != nil {
			t.Errorf("writing console: %v", err) // not Fatal: runs in goroutines
			return
		}
	}
}

type stringer string

func (s stringer) String() string { return string(s) }

// startFake is Guest.Start with a fake QEMU.
func startFake(t *testing.T, ctx context.Context, cfg Config) (*VM, *fakeQEMU) {
	t.Helper()
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	r, w := io.Pipe()
	ir, iw := io.Pipe()
	p := &fakeQEMU{console: w, input: ir, inLines: bufio.NewReader(ir), exit: make(chan error, 1), killed: make(chan struct{})}
	vm := newVM(cfg, time.Now(), r, iw, p, stringer("qemu: some warning"))
	go vm.watch(ctx)
	t.Cleanup(func() { p.Kill() })
	return vm, p
}

var staticCfg = Config{Tap: "tap0", IP: "10.99.0.2/24", Gateway: "10.99.0.1"}

func TestVMPowersOff(t *testing.T) {
	vm, p := startFake(t, t.Context(), staticCfg)
	go func() {
		p.print(t, "[    0.1] noise",
			"VMLANE-NET iface=eth0 mac=52:54:00:00:00:02 ip=10.99.0.2/24 gw=10.99.0.1 mode=static",
			"VMLANE-READY uptime=2.00",
			"VMLANE-PING target=10.99.0.1 ok sent=3 recv=3",
			"VMLANE-DONE errors=0 uptime=2.50")
		p.end(nil)
	}()
	res, err := vm.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if !res.Ready || !res.Done || res.DoneAfter < res.ReadyAfter {
		t.Errorf("Ready %v after %v, Done %v after %v", res.Ready, res.ReadyAfter, res.Done, res.DoneAfter)
	}
	if p, ok := res.Ping("10.99.0.1"); !ok || !p.OK {
		t.Errorf("Ping(10.99.0.1) = %+v, %v", p, ok)
	}
	if !strings.HasPrefix(res.Console, "[    0.1] noise\nVMLANE-NET ") || res.Stderr != "qemu: some warning" {
		t.Errorf("Console %q, Stderr %q", res.Console, res.Stderr)
	}
}

func TestVMFailures(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		ctx     func(context.Context) context.Context
		run     func(*testing.T, *fakeQEMU)
		wantIs  error
		wantMsg string
	}{
		{
			name: "guest stops without VMLANE-DONE",
			cfg:  staticCfg,
			run: func(t *testing.T, p *fakeQEMU) {
				p.print(t, "Kernel panic - not syncing: Attempted to kill init!")
				p.end(nil)
			},
			wantMsg: "without VMLANE-DONE\n--- console (tail) ---\nKernel panic",
		},
		{
			name: "qemu fails",
			cfg:  staticCfg,
			run: func(t *testing.T, p *fakeQEMU) {
				p.end(errors.New("exit status 1"))
			},
			wantMsg: "qemu: exit status 1\n--- console (tail) ---\n\n--- qemu stderr ---\nqemu: some warning",
		},
		{
			name:    "timeout",
			cfg:     Config{Tap: "tap0", IP: "10.99.0.2/24", Timeout: 20 * time.Millisecond},
			run:     func(*testing.T, *fakeQEMU) {},
			wantIs:  context.DeadlineExceeded,
			wantMsg: "guest still running after 20ms",
		},
		{
			name: "context cancelled",
			cfg:  staticCfg,
			ctx: func(ctx context.Context) context.Context {
				ctx, cancel := context.WithCancel(ctx)
				cancel()
				return ctx
			},
			run:     func(*testing.T, *fakeQEMU) {},
			wantIs:  context.Canceled,
			wantMsg: "stopped guest",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			if tt.ctx != nil {
				ctx = tt.ctx(ctx)
			}
			vm, p := startFake(t, ctx, tt.cfg)
			go tt.run(t, p)
			_, err := vm.Wait()
			if err == nil || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("Wait() error = %v, want one containing %q", err, tt.wantMsg)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("Wait() error = %v, want errors.Is %v", err, tt.wantIs)
			}
		})
	}
}

func TestVMHoldReadyStop(t *testing.T) {
	cfg := staticCfg
	cfg.Hold = true
	vm, p := startFake(t, t.Context(), cfg)

	go p.print(t, "VMLANE-NET iface=eth0 mac=52:54:00:00:00:02 ip=10.99.0.2/24 gw=10.99.0.1 mode=static",
		"VMLANE-READY uptime=2.00")
	res, err := vm.Ready(t.Context())
	if err != nil || res.Net == nil || !res.Ready {
		t.Fatalf("Ready() = %+v, %v", res, err)
	}

	// Held must wait for the report, not return on the ones before it.
	heldc := make(chan error, 1)
	go func() {
		_, err := vm.Held(t.Context())
		heldc <- err
	}()
	select {
	case err := <-heldc:
		t.Fatalf("Held() returned %v before VMLANE-HOLD", err)
	case <-time.After(20 * time.Millisecond):
	}
	go p.print(t, "VMLANE-PING target=10.99.0.1 ok sent=3 recv=3", "VMLANE-HOLD uptime=2.5")
	if err := <-heldc; err != nil {
		t.Fatalf("Held() = %v", err)
	}

	res, err = vm.Stop()
	if err != nil {
		t.Errorf("Stop() = %v, want nil: the caller asked for it", err)
	}
	if !res.Held || res.Done {
		t.Errorf("Held %v Done %v, want held and not done", res.Held, res.Done)
	}
	select {
	case <-p.killed:
	default:
		t.Error("Stop did not kill QEMU")
	}
	if _, err := vm.Stop(); err != nil {
		t.Errorf("second Stop() = %v", err)
	}
}

func TestVMReadyFailsWhenGuestExits(t *testing.T) {
	vm, p := startFake(t, t.Context(), staticCfg)
	go func() {
		p.print(t, "VMLANE-ERROR msg=no_interface_with_mac_any", "VMLANE-DONE errors=1 uptime=1")
		p.end(nil)
	}()
	res, err := vm.Ready(t.Context())
	if err == nil || !strings.Contains(err.Error(), "VMLANE-READY") {
		t.Errorf("Ready() error = %v, want one naming VMLANE-READY", err)
	}
	if len(res.Errors) != 1 {
		t.Errorf("Errors = %q, want the guest's", res.Errors)
	}
}

// A held guest that failed to configure never exits by itself: Ready must
// give up on its VMLANE-HOLD rather than wait for the timeout.
func TestVMReadyFailsWhenHeldGuestFailed(t *testing.T) {
	cfg := staticCfg
	cfg.Hold = true
	vm, p := startFake(t, t.Context(), cfg)
	go p.print(t, "VMLANE-ERROR msg=no_interface_with_mac_any", "VMLANE-HOLD uptime=1")
	_, err := vm.Ready(t.Context())
	if err == nil || !strings.Contains(err.Error(), "guest finished without it (guest: no interface with mac any)") {
		t.Errorf("Ready() error = %v, want one saying the guest finished, with its error", err)
	}
}

func TestRunRejectsHold(t *testing.T) {
	if _, err := (Guest{}).Run(t.Context(), Config{Hold: true}); err == nil {
		t.Error("Run with Hold: want an error")
	}
}

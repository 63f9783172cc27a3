package testvm

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// command reads the next command line the VM sent to the guest.
func (p *fakeQEMU) command(t *testing.T) string {
	t.Helper()
	line, err := p.inLines.ReadString('\n')
	if err != nil {
		t.Errorf("reading console input: %v (got %q)", err, line)
		return ""
	}
	return strings.TrimSuffix(line, "\n")
}

// answer reads one command, checks it is want, and prints the reply with
// fields.
func (p *fakeQEMU) answer(t *testing.T, want, fields string) {
	t.Helper()
	if got := p.command(t); got != want {
		t.Errorf("command %q, want %q", got, want)
	}
	id, _, _ := strings.Cut(want, " ")
	p.print(t, "VMLANE-REPLY id="+id+" "+fields)
}

// startHeld is startFake for a guest that has reported VMLANE-HOLD.
func startHeld(t *testing.T, ctx context.Context) (*VM, *fakeQEMU) {
	t.Helper()
	cfg := staticCfg
	cfg.Hold = true
	vm, p := startFake(t, ctx, cfg)
	go p.print(t, "VMLANE-READY uptime=1", "VMLANE-HOLD uptime=2")
	if _, err := vm.Held(t.Context()); err != nil {
		t.Fatal(err)
	}
	return vm, p
}

func TestVMPingAndFetch(t *testing.T) {
	vm, p := startHeld(t, t.Context())
	type result struct {
		ping PingResult
		body string
	}
	tests := []struct {
		name    string
		do      func() (result, error)
		command string // the line the guest should get
		reply   string // the fields the guest answers with
		want    result
		wantErr string
	}{
		{
			name: "ping",
			do: func() (result, error) {
				p, err := vm.Ping(t.Context(), "10.99.0.3", 0)
				return result{ping: p}, err
			},
			command: "c1 ping 10.99.0.3 3",
			reply:   "ok target=10.99.0.3 sent=3 recv=3 rtt=0.512",
			want:    result{ping: PingResult{Target: "10.99.0.3", OK: true, Sent: 3, Recv: 3, RTT: 512 * time.Microsecond}},
		},
		{
			name: "ping without answers is no error",
			do: func() (result, error) {
				p, err := vm.Ping(t.Context(), "10.99.0.9", 2)
				return result{ping: p}, err
			},
			command: "c2 ping 10.99.0.9 2",
			reply:   "fail target=10.99.0.9 sent=2 recv=0 rtt=",
			want:    result{ping: PingResult{Target: "10.99.0.9", Sent: 2}},
		},
		{
			name: "ping the guest refuses",
			do: func() (result, error) {
				p, err := vm.Ping(t.Context(), "10.99.0.9", 1)
				return result{ping: p}, err
			},
			command: "c3 ping 10.99.0.9 1",
			reply:   "fail msg=bad_count",
			wantErr: "ping 10.99.0.9: guest: bad count",
		},
		{
			name: "fetch",
			do: func() (result, error) {
				b, err := vm.Fetch(t.Context(), "http://10.99.0.3/cgi-bin/whoami")
				return result{body: b}, err
			},
			command: "c4 fetch http://10.99.0.3/cgi-bin/whoami",
			reply:   "ok body=10.99.0.2",
			want:    result{body: "10.99.0.2"},
		},
		{
			name: "fetch gets spaces back",
			do: func() (result, error) {
				b, err := vm.Fetch(t.Context(), "http://10.99.0.3:8080/x?a=b")
				return result{body: b}, err
			},
			command: "c5 fetch http://10.99.0.3:8080/x?a=b",
			reply:   "ok body=hello__world",
			want:    result{body: "hello  world"},
		},
		{
			name: "fetch fails",
			do: func() (result, error) {
				b, err := vm.Fetch(t.Context(), "http://10.99.0.3/nope")
				return result{body: b}, err
			},
			command: "c6 fetch http://10.99.0.3/nope",
			reply:   "fail msg=wget:_server_returned_error:_HTTP/1.1_404_Not_Found",
			wantErr: "fetch http://10.99.0.3/nope: guest: wget: server returned error: HTTP/1.1 404 Not Found",
		},
		{
			name: "unknown command",
			do: func() (result, error) {
				b, err := vm.Fetch(t.Context(), "http://x")
				return result{body: b}, err
			},
			command: "c7 fetch http://x",
			reply:   "fail msg=unknown_command",
			wantErr: "guest: unknown command",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			go func() {
				// Replies to others first: the VM must pick its own.
				p.print(t, "VMLANE-REPLY id=other ok body=nope", "VMLANE-REPLY id=c1x fail msg=nope")
				p.answer(t, tt.command, tt.reply)
			}()
			got, err := tt.do()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
	if errs := vm.Result().Errors; len(errs) > 0 {
		t.Errorf("Errors = %q", errs)
	}
}

func TestVMCommandRefused(t *testing.T) {
	notHold, _ := startFake(t, t.Context(), staticCfg)
	cfg := staticCfg
	cfg.Hold = true
	notYet, _ := startFake(t, t.Context(), cfg)
	held, _ := startHeld(t, t.Context())
	tests := []struct {
		name    string
		err     error
		wantErr string
	}{
		{"not a hold guest", pingErr(notHold, "10.0.0.1", 1), "only a Hold guest"},
		{"not held yet", pingErr(notYet, "10.0.0.1", 1), "not held yet"},
		{"bad target", pingErr(held, "-f", 1), "ParseAddr"},
		{"negative count", pingErr(held, "10.0.0.1", -1), "count -1 out of range"},
		{"huge count", pingErr(held, "10.0.0.1", 10000), "count 10000 out of range"},
		{"not http", fetchErr(held, "https://10.0.0.1/"), "want an http:// URL"},
		{"no host", fetchErr(held, "http://"), "want an http:// URL"},
		{"space", fetchErr(held, "http://10.0.0.1/a b"), "want an http:// URL"},
		{"newline", fetchErr(held, "http://10.0.0.1/\nc9 ping 10.0.0.1 1"), "want an http:// URL"},
		{"too long", fetchErr(held, "http://10.0.0.1/"+strings.Repeat("a", maxURL)), "want an http:// URL"},
	}
	for _, tt := range tests {
		if tt.err == nil || !strings.Contains(tt.err.Error(), tt.wantErr) {
			t.Errorf("%s: error %v, want one containing %q", tt.name, tt.err, tt.wantErr)
		}
	}
}

func pingErr(vm *VM, target string, count int) error {
	_, err := vm.Ping(context.Background(), target, count)
	return err
}

func fetchErr(vm *VM, url string) error {
	_, err := vm.Fetch(context.Background(), url)
	return err
}

func TestVMCommandGuestExits(t *testing.T) {
	vm, p := startHeld(t, t.Context())
	go func() {
		p.command(t)
		p.print(t, "Kernel panic - not syncing: Attempted to kill init!")
		p.end(nil)
	}()
	_, err := vm.Ping(t.Context(), "10.99.0.1", 1)
	if err == nil || !strings.Contains(err.Error(), "guest stopped without VMLANE-DONE") {
		t.Errorf("Ping() error = %v, want one saying the guest stopped", err)
	}
	if _, err := vm.Fetch(t.Context(), "http://10.99.0.1/"); err == nil {
		t.Error("Fetch() on an exited guest: want an error")
	}
}

func TestVMCommandStopped(t *testing.T) {
	vm, p := startHeld(t, t.Context())
	go func() {
		p.command(t)
		vm.Stop()
	}()
	_, err := vm.Ping(t.Context(), "10.99.0.1", 1)
	if err == nil || !strings.Contains(err.Error(), "guest stopped") {
		t.Errorf("Ping() error = %v, want one saying the guest stopped", err)
	}
}

// A command given up on must not block the next one, nor its late reply be
// taken for the next one's.
func TestVMCommandContext(t *testing.T) {
	vm, p := startHeld(t, t.Context())
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		p.command(t)
		cancel()
	}()
	_, err := vm.Ping(ctx, "10.99.0.1", 1)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Ping() error = %v, want context.Canceled", err)
	}

	go func() {
		p.print(t, "VMLANE-REPLY id=c1 fail target=10.99.0.1 sent=1 recv=0 rtt=")
		p.answer(t, "c2 ping 10.99.0.1 1", "ok target=10.99.0.1 sent=1 recv=1 rtt=1.5")
	}()
	got, err := vm.Ping(t.Context(), "10.99.0.1", 1)
	if err != nil || !got.OK || got.RTT != 1500*time.Microsecond {
		t.Errorf("second Ping() = %+v, %v; want ok with rtt 1.5ms", got, err)
	}
}

func TestVMCommandsOneAtATime(t *testing.T) {
	vm, p := startHeld(t, t.Context())
	lines := make(chan string)
	go func() {
		for {
			line, err := p.inLines.ReadString('\n')
			if err != nil {
				return
			}
			lines <- strings.TrimSuffix(line, "\n")
		}
	}()
	done := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := vm.Ping(t.Context(), "10.99.0.1", 1)
			done <- err
		}()
	}
	first := <-lines
	select {
	case l := <-lines:
		t.Fatalf("second command %q sent before the first %q was answered", l, first)
	case <-time.After(30 * time.Millisecond):
	}
	id, _, _ := strings.Cut(first, " ")
	go p.print(t, "VMLANE-REPLY id="+id+" ok target=10.99.0.1 sent=1 recv=1 rtt=1")
	second := <-lines
	if second == first {
		t.Fatalf("two commands %q", first)
	}
	id, _, _ = strings.Cut(second, " ")
	go p.print(t, "VMLANE-REPLY id="+id+" ok target=10.99.0.1 sent=1 recv=1 rtt=1")
	for range 2 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

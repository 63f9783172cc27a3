package testvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Commands for a held guest. Once it has reported VMLANE-HOLD, guest/init
// reads the serial console (with echo off) one line at a time and runs one
// command at a time:
//
//	ID ping TARGET COUNT  ->  VMLANE-REPLY id=ID ok|fail target=T sent=N recv=M rtt=AVG_MS
//	ID fetch URL          ->  VMLANE-REPLY id=ID ok body=FIRST_LINE
//	                          VMLANE-REPLY id=ID fail msg=ERROR
//
// A line it cannot run gets VMLANE-REPLY id=ID fail msg=REASON
// (unknown_command, bad_target, ...). Values hold no spaces: the guest
// turns them into _. Command lines are printable ASCII only: the guest's
// tty is in canonical mode, where control characters edit the line or
// raise signals.
const (
	// maxPingCount is the largest count the guest accepts (four digits).
	maxPingCount = 9999
	// maxURL keeps a command line well inside the guest tty's line buffer
	// (4095 bytes in canonical mode).
	maxURL = 1024
	// replyGrace is how long a command may take beyond its own limits
	// (ping's -i 0.2 -W 2, wget's 5 s timeout) before the VM gives up on
	// its reply: a TCG guest under a loaded host is slow.
	replyGrace = 30 * time.Second
)

// Ping has the held guest ping target, an IP address, count times 0.2 s
// apart (count 0 means [DefaultPingCount]), like the pings of
// [Config.Ping]. The result says whether any echo came back (OK) and the
// average round-trip time. The error is only for a ping that did not run:
// the guest is not held (see [VM.Held]) or has exited, an argument is bad,
// ctx ended, or the guest did not answer in time. A ping without replies
// is a PingResult with OK false and a nil error.
//
// Commands to one VM run one at a time; concurrent calls wait their turn.
func (vm *VM) Ping(ctx context.Context, target string, count int) (PingResult, error) {
	if count == 0 {
		count = DefaultPingCount
	}
	if _, err := netip.ParseAddr(target); err != nil {
		return PingResult{}, fmt.Errorf("testvm: ping: %w", err)
	}
	if count < 0 || count > maxPingCount {
		return PingResult{}, fmt.Errorf("testvm: ping %s: count %d out of range 1-%d", target, count, maxPingCount)
	}
	limit := replyGrace + time.Duration(count)*200*time.Millisecond
	r, err := vm.command(ctx, limit, "ping", target, strconv.Itoa(count))
	if err != nil {
		return PingResult{}, err
	}
	if _, refused := r.ev.fields["msg"]; refused {
		return PingResult{}, fmt.Errorf("testvm: ping %s: guest: %s", target, r.message())
	}
	p, err := parsePing(r.ev)
	if err != nil {
		return p, fmt.Errorf("testvm: ping %s: parsing %q: %w", target, r.ev.String(), err)
	}
	return p, nil
}

// Fetch has the held guest GET url (http:// only) with busybox wget, which
// gives up after 5 s, and returns the first line of the body. The guest
// sends that line with its spaces (and tabs and other unprintables) as _;
// Fetch turns every _ back into a space, so a body's own underscores come
// back as spaces too. A failed GET (no connection, an HTTP error status) is
// an error with wget's message; the other errors are as for [VM.Ping].
//
// Every held guest serves http://ADDR/cgi-bin/whoami (busybox httpd on
// port 80), whose body is the address the client came from as that guest
// sees it, e.g. 10.1.2.3: the CGI unwraps the [::ffff:10.1.2.3] that the
// dual-stack httpd sees for an IPv4 client.
func (vm *VM) Fetch(ctx context.Context, url string) (string, error) {
	if !goodURL(url, "") {
		return "", fmt.Errorf("testvm: fetch %q: want an http:// URL of printable ASCII without spaces, at most %d bytes", url, maxURL)
	}
	r, err := vm.command(ctx, replyGrace, "fetch", url)
	if err != nil {
		return "", err
	}
	if !r.ok {
		return "", fmt.Errorf("testvm: fetch %s: guest: %s", url, r.message())
	}
	return strings.ReplaceAll(r.ev.fields["body"], "_", " "), nil
}

// command sends one command line, args after a fresh id, to the held guest
// and waits up to limit for the guest's reply with that id.
func (vm *VM) command(ctx context.Context, limit time.Duration, args ...string) (reply, error) {
	what := strings.Join(args, " ")
	if !vm.cfg.Hold {
		return reply{}, fmt.Errorf("testvm: %s: only a Hold guest takes commands", what)
	}
	select {
	case <-vm.exited:
		return reply{}, vm.goneErr(what)
	default:
	}
	vm.mu.Lock()
	held := vm.res.Held
	vm.mu.Unlock()
	if !held {
		return reply{}, fmt.Errorf("testvm: %s: the guest is not held yet (wait for VM.Held)", what)
	}

	select {
	case vm.cmd <- struct{}{}:
	case <-vm.exited:
		return reply{}, vm.goneErr(what)
	case <-ctx.Done():
		return reply{}, fmt.Errorf("testvm: %s: waiting for the previous command: %w", what, context.Cause(ctx))
	}
	defer func() { <-vm.cmd }()

	vm.nextID++
	id := "c" + strconv.Itoa(vm.nextID)
	if _, err := io.WriteString(vm.input, id+" "+what+"\n"); err != nil {
		select {
		case <-vm.exited:
			return reply{}, vm.goneErr(what)
		default:
		}
		return reply{}, fmt.Errorf("testvm: %s: writing to the console: %w", what, err)
	}
	return vm.waitReply(ctx, id, what, limit)
}

// waitReply waits for the VMLANE-REPLY with id and takes it.
func (vm *VM) waitReply(ctx context.Context, id, what string, limit time.Duration) (reply, error) {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	exited := vm.exited
	for {
		vm.mu.Lock()
		r, ok := vm.replies[id]
		delete(vm.replies, id)
		changed := vm.changed
		vm.mu.Unlock()
		if ok {
			return r, nil
		}
		if exited == nil {
			// The console is read to its end before exited is closed: the
			// reply is not coming.
			return reply{}, vm.goneErr(what)
		}
		select {
		case <-changed:
		case <-exited:
			exited = nil // look once more, then give up
		case <-ctx.Done():
			return reply{}, fmt.Errorf("testvm: %s: waiting for the guest's reply: %w", what, context.Cause(ctx))
		case <-timer.C:
			vm.mu.Lock()
			tail := vm.tailLocked()
			vm.mu.Unlock()
			return reply{}, fmt.Errorf("testvm: %s: no VMLANE-REPLY id=%s after %v: %w%s",
				what, id, limit, context.DeadlineExceeded, tail)
		}
	}
}

// goneErr says that the guest exited before it could answer a command.
func (vm *VM) goneErr(what string) error {
	err := vm.exitErr()
	if err == nil {
		err = errors.New("testvm: guest stopped")
	}
	return fmt.Errorf("%s: %w", what, err)
}

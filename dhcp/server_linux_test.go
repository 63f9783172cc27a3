package dhcp

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/privtest"
	"github.com/vmlane/vmlane/leases"
)

// udhcpcScript records the environment udhcpc hands its script on bound
// and renew (one KEY=VALUE a line) and configures the address, as a guest's
// script does: udhcpc sends RELEASE from it through the kernel's stack.
const udhcpcScript = `#!/bin/sh
case "$1" in
bound|renew)
	env > "$0.env.$1"
	ip addr flush dev "$interface"
	ip addr add "$ip/$mask" dev "$interface"
	;;
esac
exit 0
`

// TestUdhcpc runs busybox udhcpc in a client namespace against Serve on a
// bridge in a server namespace, and checks every option as the client saw
// it, and the lease file after bind, renew and release.
func TestUdhcpc(t *testing.T) {
	privtest.Require(t, "ip", "busybox")
	srv := netnstest.New(t, "dsrv")
	cli := netnstest.New(t, "dcli")
	const mac = "02:00:0a:62:00:32"
	srv.MustRun(t, "ip", "link", "add", "br0", "type", "bridge")
	srv.MustRun(t, "ip", "addr", "add", "10.98.0.1/24", "dev", "br0")
	srv.MustRun(t, "ip", "link", "set", "br0", "up")
	srv.MustRun(t, "ip", "link", "add", "vh0", "type", "veth", "peer", "name", "eth0", "netns", cli.Name)
	srv.MustRun(t, "ip", "link", "set", "vh0", "master", "br0", "up")
	cli.MustRun(t, "ip", "link", "set", "eth0", "address", mac, "up")

	dir := t.TempDir()
	path := filepath.Join(dir, "leases.json")
	st, err := leases.Open(path, netip.MustParsePrefix("10.98.0.0/24"), netip.MustParseAddr("10.98.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Reserve(leases.ReserveRequest{
		Key: leases.Key{ContainerID: "c1", IfName: "eth0"}, MAC: mac, IP: netip.MustParseAddr("10.98.0.50"),
		Pod: leases.Pod{Namespace: "default", Name: "vm-a"},
	}); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Routes = []Route{{Dest: netip.MustParsePrefix("172.16.0.0/12"), Via: netip.MustParseAddr("10.98.0.254")}}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	h, err := NewHandler(cfg, NewStoreAllocator(st), WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		// Sockets keep the namespace of the thread that made them.
		runtime.LockOSThread()
		done <- srv.Do(func() error { return Serve(ctx, "br0", h, log) })
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("Serve did not return after cancel")
		}
	})

	script := filepath.Join(dir, "script.sh")
	if err := os.WriteFile(script, []byte(udhcpcScript), 0o755); err != nil {
		t.Fatal(err)
	}
	udhcpc := func(extra ...string) map[string]string {
		t.Helper()
		os.Remove(script + ".env.bound")
		args := append([]string{"udhcpc", "-i", "eth0", "-n", "-q", "-f", "-t", "5", "-T", "1", "-s", script}, extra...)
		out, err := cli.Run("busybox", args...)
		if err != nil {
			t.Fatalf("udhcpc: %v", err)
		}
		env := udhcpcEnv(script, "bound")
		if env == nil {
			t.Fatalf("udhcpc never ran its script with bound\n%s", out)
		}
		return env
	}
	bound := func() leases.Lease {
		t.Helper()
		snap, err := leases.Read(path)
		if err != nil {
			t.Fatal(err)
		}
		l, ok := snap.ByIP(netip.MustParseAddr("10.98.0.50"))
		if !ok {
			t.Fatal("lease gone from the file")
		}
		return l
	}

	start := time.Now()
	env := udhcpc()
	want := map[string]string{
		"ip":        "10.98.0.50",
		"subnet":    "255.255.255.0",
		"mask":      "24",
		"broadcast": "10.98.0.255",
		"router":    "10.98.0.1",
		"dns":       "10.96.0.10 1.1.1.1",
		"domain":    "cluster.local",
		"search":    "default.svc.cluster.local svc.cluster.local",
		"hostname":  "vm-a",
		"mtu":       "1450",
		"lease":     "3600",
		"serverid":  "10.98.0.1",
		// RFC 3442 order as sent: the extra route, the default route last.
		"staticroutes": "172.16.0.0/12 10.98.0.254 0.0.0.0/0 10.98.0.1",
	}
	got := map[string]string{}
	for k := range want {
		got[k] = strings.TrimSpace(env[k])
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("udhcpc environment (-want +got):\n%s", diff)
	}
	l := bound()
	if l.State != leases.StateBound || l.Expires.Before(start.Add(59*time.Minute)) || l.MAC != mac || l.Hostname != "vm-a" {
		t.Errorf("after udhcpc the lease is %+v, want bound for an hour", l)
	}

	// A second run (a reboot) gets the same address and extends the lease.
	if env := udhcpc(); env["ip"] != "10.98.0.50" {
		t.Errorf("second run got %q", env["ip"])
	}
	if l := bound(); l.State != leases.StateBound {
		t.Errorf("after the second run: %+v", l)
	}

	// Release. busybox 1.35's `-q -R` quits before it counts itself bound
	// and sends no RELEASE, so run a resident client and send it SIGUSR2,
	// its "release now" signal.
	os.Remove(script + ".env.bound")
	cmd := cli.Command("busybox", "udhcpc", "-i", "eth0", "-f", "-t", "5", "-T", "1", "-s", script)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	waitFor(t, "udhcpc to bind", func() bool { _, err := os.Stat(script + ".env.bound"); return err == nil })
	if err := cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the lease to go back to reserved", func() bool { return bound().State == leases.StateReserved })
	if l := bound(); !l.Expires.IsZero() || l.ContainerID != "c1" {
		t.Errorf("after release: %+v, want reserved without expiry, still attachment c1", l)
	}
}

// udhcpcEnv is the environment udhcpcScript recorded for event, nil when
// it has not run for it.
func udhcpcEnv(script, event string) map[string]string {
	data, err := os.ReadFile(script + ".env." + event)
	if err != nil {
		return nil
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	return env
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestListenIsBound: once Listen returns, the server's port 67 socket is
// bound on the interface, before Serve runs (vmlaned reports ready on
// that), and a bridge that does not exist is Listen's error, naming it.
func TestListenIsBound(t *testing.T) {
	privtest.Require(t, "ip")
	ns := netnstest.New(t, "dlis")
	ns.MustRun(t, "ip", "link", "add", "br0", "type", "bridge")
	ns.MustRun(t, "ip", "addr", "add", "10.98.0.1/24", "dev", "br0")
	ns.MustRun(t, "ip", "link", "set", "br0", "up")
	h, err := NewHandler(testConfig(), newFake())
	if err != nil {
		t.Fatal(err)
	}
	var udp []byte
	err = ns.Do(func() error {
		if _, err := Listen("nope0", h); err == nil || !strings.Contains(err.Error(), "nope0") {
			return fmt.Errorf("Listen on a missing interface = %v, want an error naming it", err)
		}
		s, err := Listen("br0", h)
		if err != nil {
			return err
		}
		defer s.Close()
		// /proc/net/udp is the reading thread's namespace's.
		udp, err = os.ReadFile("/proc/thread-self/net/udp")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(udp), ":0043 ") {
		t.Fatalf("no socket on port 67 after Listen returned:\n%s", udp)
	}
}

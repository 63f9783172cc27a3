package sysctl

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakeSysctl is macOS's sysctl(8) as a command.Runner: -n prints a
// value, -w sets one, and a name it does not know is an error.
type fakeSysctl struct {
	vals  map[string]string
	calls []string
}

func (f *fakeSysctl) Run(stdin string, argv ...string) (string, error) {
	f.calls = append(f.calls, strings.Join(argv, " "))
	switch {
	case len(argv) == 3 && argv[0] == "sysctl" && argv[1] == "-n":
		v, ok := f.vals[argv[2]]
		if !ok {
			return "sysctl: unknown oid '" + argv[2] + "'\n", errors.New("exit status 1")
		}
		return v + "\n", nil
	case len(argv) == 3 && argv[0] == "sysctl" && argv[1] == "-w":
		k, v, _ := strings.Cut(argv[2], "=")
		if _, ok := f.vals[k]; !ok {
			return "", errors.New("exit status 1")
		}
		f.vals[k] = v
		return "", nil
	}
	return "", errors.New("unexpected command")
}

func TestEnsureForwardingCommand(t *testing.T) {
	f := &fakeSysctl{vals: map[string]string{MacIPv4Forwarding: "0", MacIPv6Forwarding: "1"}}
	s := Command{Run: f}
	changed, err := EnsureForwarding(s, MacIPv4Forwarding, MacIPv6Forwarding)
	if err != nil || !cmp.Equal(changed, []string{MacIPv4Forwarding}) {
		t.Fatalf("changed %v, err %v", changed, err)
	}
	want := []string{"sysctl -n net.inet.ip.forwarding", "sysctl -w net.inet.ip.forwarding=1", "sysctl -n net.inet6.ip6.forwarding"}
	if diff := cmp.Diff(want, f.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	// Once on, a resync only reads.
	f.calls = nil
	if changed, err := EnsureForwarding(s, MacIPv4Forwarding); changed != nil || err != nil || len(f.calls) != 1 {
		t.Errorf("second pass: changed %v, err %v, calls %v", changed, err, f.calls)
	}
	// An unknown setting is an error naming it; the others are still set.
	f.vals[MacIPv4Forwarding] = "0"
	changed, err = EnsureForwarding(s, "net.bogus", MacIPv4Forwarding)
	if err == nil || !strings.Contains(err.Error(), "net.bogus") || !cmp.Equal(changed, []string{MacIPv4Forwarding}) {
		t.Errorf("unknown setting: changed %v, err %v", changed, err)
	}
}

func TestEnsureForwardingProc(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "net/ipv4/ip_forward")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := Proc{Root: root}
	changed, err := EnsureForwarding(p, LinuxIPv4Forwarding)
	if err != nil || len(changed) != 1 {
		t.Fatalf("changed %v, err %v", changed, err)
	}
	if b, _ := os.ReadFile(file); string(b) != "1\n" {
		t.Errorf("file holds %q", b)
	}
	// A setting the kernel lacks is an error, never a new file.
	if _, err := EnsureForwarding(p, LinuxIPv6Forwarding); err == nil {
		t.Error("a missing setting was created")
	}
	if _, err := os.Stat(filepath.Join(root, "net/ipv6")); !os.IsNotExist(err) {
		t.Errorf("net/ipv6 exists: %v", err)
	}
}

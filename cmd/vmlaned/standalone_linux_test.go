package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmlane/vmlane/internal/testing/syncbuf"

	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/privtest"
)

func buildBinaries(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("VMLANE_BIN_DIR"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "vmlaned")); err == nil {
			return d
		}
	}
	dir := t.TempDir()
	out, err := exec.Command("go", "build", "-o", dir+"/", "github.com/vmlane/vmlane/cmd/...").CombinedOutput()
	if err != nil {
		t.Fatalf("building: %v\n%s", err, out)
	}
	return dir
}

// TestStandaloneBootstrapAndTeardown runs vmlaned --pod-cidr in a fresh
// netns: it makes the bridge and both conflists and turns ready; SIGTERM
// leaves them; vmlanectl teardown removes them.
func TestStandaloneBootstrapAndTeardown(t *testing.T) {
	privtest.Require(t, "ip", "iptables")
	bin := buildBinaries(t)
	n := netnstest.New(t, "d")
	confDir := t.TempDir()
	cmd := n.Command(filepath.Join(bin, "vmlaned"), "--pod-cidr", "10.250.20.0/24", "--cni-conf-dir", confDir,
		"--lease-file", filepath.Join(t.TempDir(), "leases.json"), "--health-addr", "127.0.0.1:19465", "--metrics-addr", "127.0.0.1:19464")
	var logs syncBuffer
	cmd.Stderr = &logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	// /readyz is on the netns's loopback: dial from a thread inside it
	// (http.Transport would dial from another goroutine, outside).
	get := func(path string) string {
		var conn net.Conn
		n.Do(func() (err error) {
			conn, err = net.DialTimeout("tcp", "127.0.0.1:19465", time.Second)
			return err
		})
		if conn == nil {
			return ""
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(2 * time.Second))
		fmt.Fprintf(conn, "GET %s HTTP/1.0\r\n\r\n", path)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return ""
		}
		resp.Body.Close()
		return resp.Status
	}
	ready := false
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && !ready; time.Sleep(100 * time.Millisecond) {
		ready = get("/readyz") == "200 OK"
	}
	if !ready {
		t.Fatalf("vmlaned never turned ready; log:\n%s", logs.String())
	}
	addr := n.MustRun(t, "ip", "-o", "addr", "show", "dev", "vmlane0")
	if !strings.Contains(addr, "10.250.20.1/24") {
		t.Errorf("bridge lacks the gateway: %s", addr)
	}
	for _, f := range []string{ConflistName, VMConflistName} {
		data, err := os.ReadFile(filepath.Join(confDir, f))
		if err != nil || !strings.Contains(string(data), `"subnet": "10.250.20.0/24"`) {
			t.Errorf("%s: %v\n%s", f, err, data)
		}
	}
	// A second vmlaned on the same bridge refuses to start.
	second := n.Command(cmd.Args[4], cmd.Args[5:]...)
	if out, err := second.CombinedOutput(); err == nil || !strings.Contains(string(out), "already serves bridge vmlane0") {
		t.Errorf("second vmlaned on the same bridge: %v\n%s", err, out)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("vmlaned exit after SIGTERM: %v\n%s", err, logs.String())
	}
	if _, err := n.Run("ip", "link", "show", "vmlane0"); err != nil {
		t.Error("SIGTERM removed the bridge; it must stay so traffic keeps flowing")
	}

	out, err := n.Run(filepath.Join(bin, "vmlanectl"), "teardown", "--cni-conf-dir", confDir)
	if err != nil {
		t.Fatalf("teardown: %v", err)
	}
	if _, err := n.Run("ip", "link", "show", "vmlane0"); err == nil {
		t.Errorf("bridge still there after teardown:\n%s", out)
	}
	if ents, _ := os.ReadDir(confDir); len(ents) != 0 {
		t.Errorf("conflists left after teardown: %v", ents)
	}
}

// syncBuffer collects a child's output while the test reads it.
type syncBuffer = syncbuf.Buffer

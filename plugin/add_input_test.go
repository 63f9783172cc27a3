package plugin

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/google/go-cmp/cmp"
	"github.com/vmlane/vmlane/leases"
)

// ADD refused or shaped by its input: the lease file, the subnet, the
// bridge, the netns, the config, and the address and MAC asked for.

// TestPluginAddCorruptLeaseFile: ADD refuses to write over a lease file it
// cannot read, and builds nothing.
func TestPluginAddCorruptLeaseFile(t *testing.T) {
	h := newHarness(t, nil)
	if err := os.WriteFile(h.leaseFile, []byte("{garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := h.add(att("a"), nil)
	wantCode(t, err, types.ErrIOFailure)
	if got, _ := os.ReadFile(h.leaseFile); string(got) != "{garbage" {
		t.Errorf("lease file rewritten: %q", got)
	}
	if got := h.dp.linkNames("/run/netns/a"); len(got) != 0 {
		t.Errorf("pod links %q", got)
	}
}

func TestPluginAddExhausted(t *testing.T) {
	h := newHarness(t, map[string]any{"subnet": "10.244.3.0/30"})
	r := h.mustAdd(att("a"), nil)
	if got := ipLines(r); !slices.Equal(got, []string{"10.244.3.2/30 gw 10.244.3.1 on 2"}) {
		t.Errorf("first ADD: %q", got)
	}
	state, leaseLines := h.dp.state(), h.leaseLines()
	_, err := h.add(att("b"), nil)
	wantCode(t, err, types.ErrTryAgainLater, "full", "10.244.3.0/30")
	h.wantState(state)
	if diff := cmp.Diff(leaseLines, h.leaseLines()); diff != "" {
		t.Errorf("leases (-before +after):\n%s", diff)
	}
	// Once a leaves, b fits.
	if err := h.del(att("a"), nil); err != nil {
		t.Fatal(err)
	}
	h.mustAdd(att("b"), nil)
}

func TestPluginAddBadBridge(t *testing.T) {
	h := newHarness(t, map[string]any{"bridge": "eth0"})
	h.dp.addForeignLink("eth0", "device")
	state := h.dp.state()
	_, err := h.add(att("a"), nil)
	e := wantCode(t, err, types.ErrInvalidNetworkConfig, "bridge", "eth0", "device")
	if !strings.Contains(e.Msg, `bridge "eth0"`) {
		t.Errorf("message %q does not name field and value together", e.Msg)
	}
	h.wantState(state)
	h.wantLeases()
}

func TestPluginAddNoNetns(t *testing.T) {
	h := newHarness(t, nil)
	a := att("a")
	out, err := captureStdout(t, func() error { return h.p.Add(a.cmdArgs(h.conf(nil))) }) // netns never made
	wantCode(t, err, types.ErrUnknownContainer, a.netns)
	if out != "" {
		t.Errorf("stdout %q", out)
	}
	h.wantState(nil)
	h.wantLeases()

	a.netns = ""
	_, err = captureStdout(t, func() error { return h.p.Add(a.cmdArgs(h.conf(nil))) })
	wantCode(t, err, types.ErrUnknownContainer)
}

func TestPluginAddBadInput(t *testing.T) {
	tests := []struct {
		name  string
		args  string
		extra map[string]any
		code  uint
	}{
		{name: "unknown CNI_ARGS", args: "FOO=bar", code: types.ErrInvalidEnvironmentVariables},
		{name: "bad config", extra: map[string]any{"subnet": "10.244.3.0/31"}, code: types.ErrInvalidNetworkConfig},
		{name: "relative lease file", extra: map[string]any{"leaseFile": "l.json"}, code: types.ErrInvalidNetworkConfig},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			a := att("a")
			a.args = tc.args
			out, err := h.add(a, tc.extra)
			wantCode(t, err, tc.code)
			if out != "" {
				t.Errorf("stdout %q", out)
			}
			h.wantState(nil)
			h.wantLeases()
		})
	}
}

// TestPluginStdout: ADD prints exactly its result; the log goes to the
// stderr writer (or the log file), never to stdout.
func TestPluginStdout(t *testing.T) {
	// stderr gets warnings and errors only, unless logLevel says more.
	h := newHarness(t, nil)
	out, err := h.add(att("a"), nil)
	if err != nil {
		t.Fatal(err)
	}
	parseResult(t, out)
	if h.stderr.Len() != 0 {
		t.Errorf("stderr after a successful ADD at the default level: %q", h.stderr.String())
	}
	h.dp.failNth("SetupVeth", 1, false)
	if out, err := h.add(att("b"), nil); err == nil || out != "" {
		t.Errorf("failed ADD: err %v, stdout %q", err, out)
	}
	if !strings.Contains(h.stderr.String(), "level=ERROR msg=failed") {
		t.Errorf("stderr lacks the failure: %q", h.stderr.String())
	}

	h = newHarness(t, map[string]any{"logLevel": "debug"})
	out, err = h.add(att("a"), nil)
	if err != nil {
		t.Fatal(err)
	}
	parseResult(t, out)
	if !strings.Contains(h.stderr.String(), "msg=attached component=cni verb=ADD containerID=a") {
		t.Errorf("log on stderr: %q", h.stderr.String())
	}

	logFile := filepath.Join(t.TempDir(), "vmlane.log")
	h2 := newHarness(t, map[string]any{"logFile": logFile})
	out, err = h2.add(att("a"), nil)
	if err != nil {
		t.Fatal(err)
	}
	parseResult(t, out)
	if b, _ := os.ReadFile(logFile); !strings.Contains(string(b), "attached") {
		t.Errorf("log file: %q", b)
	}
	if h2.stderr.Len() != 0 {
		t.Errorf("stderr %q with a log file set", h2.stderr.String())
	}
	// A failed ADD logs the failure and prints nothing.
	h2.dp.failNth("SetupVeth", 1, false)
	out, err = h2.add(att("b"), nil)
	if err == nil || out != "" {
		t.Errorf("failed ADD: err %v, stdout %q", err, out)
	}
	if b, _ := os.ReadFile(logFile); !strings.Contains(string(b), "failed") {
		t.Errorf("log file lacks the failure: %q", b)
	}
}

func TestPluginRequested(t *testing.T) {
	ips := func(s ...string) map[string]any { return map[string]any{"runtimeConfig": map[string]any{"ips": s}} }
	t.Run("ip", func(t *testing.T) {
		h := newHarness(t, nil)
		r := h.mustAdd(att("a"), ips("10.244.3.77/24", "fd00::77/64"))
		if got := ipLines(r); !slices.Equal(got, []string{"10.244.3.77/24 gw 10.244.3.1 on 2"}) {
			t.Errorf("result ips %q", got)
		}
		h.wantState(concat(bridgeState, plainState("a", "10.244.3.77")))
		h.wantLeases("10.244.3.77 mac=02:76:0a:f4:03:4d reserved cni attachment=a/eth0 netns=/run/netns/a")
	})
	t.Run("mac vm", func(t *testing.T) {
		h := newHarness(t, map[string]any{"vm": true})
		r := h.mustAdd(att("a"), map[string]any{"runtimeConfig": map[string]any{"mac": "0A:58:0A:F4:03:07"}})
		if tap := r.Interfaces[ifTap]; tap.Mac != "0a:58:0a:f4:03:07" {
			t.Errorf("TAP entry %+v, want the requested MAC", tap)
		}
		h.wantState(concat(bridgeState, vmState("a", "10.244.3.2", "0a:58:0a:f4:03:07")))
		h.wantLeases("10.244.3.2 mac=0a:58:0a:f4:03:07 reserved cni attachment=a/eth0 netns=/run/netns/a")
	})
	t.Run("mac and ip plain", func(t *testing.T) {
		h := newHarness(t, nil)
		r := h.mustAdd(att("a"), map[string]any{"runtimeConfig": map[string]any{"mac": "0a:58:0a:f4:03:07", "ips": []string{"10.244.3.9"}}})
		if pod := r.Interfaces[ifPodVeth]; pod.Mac != "0a:58:0a:f4:03:07" {
			t.Errorf("pod entry %+v, want the requested MAC", pod)
		}
		if !slices.Contains(h.dp.state(), "ip -n /run/netns/a link set eth0 address 0a:58:0a:f4:03:07 mtu 1500 up") {
			t.Errorf("pod veth lacks the requested MAC:\n%s", strings.Join(h.dp.state(), "\n"))
		}
		h.wantLeases("10.244.3.9 mac=0a:58:0a:f4:03:07 reserved cni attachment=a/eth0 netns=/run/netns/a")
	})
	t.Run("ip held by another", func(t *testing.T) {
		h := newHarness(t, nil)
		h.mustAdd(att("a"), ips("10.244.3.77/24"))
		state, leaseLines := h.dp.state(), h.leaseLines()
		_, err := h.add(att("b"), ips("10.244.3.77/24"))
		wantCode(t, err, types.ErrInvalidNetworkConfig, "10.244.3.77", "in use")
		h.wantState(state)
		if diff := cmp.Diff(leaseLines, h.leaseLines()); diff != "" {
			t.Errorf("leases (-before +after):\n%s", diff)
		}
	})
	t.Run("mac held by another", func(t *testing.T) {
		h := newHarness(t, map[string]any{"vm": true})
		h.mustAdd(att("a"), nil) // 10.244.3.2, MAC 02:76:0a:f4:03:02
		leaseLines := h.leaseLines()
		_, err := h.add(att("b"), map[string]any{"runtimeConfig": map[string]any{"mac": "02:76:0a:f4:03:02"}})
		wantCode(t, err, types.ErrInvalidNetworkConfig, "02:76:0a:f4:03:02")
		if diff := cmp.Diff(leaseLines, h.leaseLines()); diff != "" {
			t.Errorf("leases (-before +after):\n%s", diff)
		}
	})
	for _, ip := range []string{"10.244.3.1", "10.244.3.0", "10.244.3.255"} {
		t.Run("ip "+ip+" is not for pods", func(t *testing.T) {
			h := newHarness(t, nil)
			_, err := h.add(att("a"), ips(ip))
			wantCode(t, err, types.ErrInvalidNetworkConfig, "runtimeConfig.ips", ip)
			h.wantLeases()
		})
	}
}

// TestPluginRequestedMACInDerivedRange: a runtime may ask for any MAC, one
// that looks like vmlane's own (02:76 + an address) included. Whatever the
// plugin answers to that request, pods that ask for nothing must still get
// addresses.
func TestPluginRequestedMACInDerivedRange(t *testing.T) {
	h := newHarness(t, map[string]any{"vm": true})
	_, _ = h.add(att("a"), map[string]any{"runtimeConfig": map[string]any{"mac": "02:76:0a:f4:03:03"}})
	seen := map[string]bool{}
	for _, id := range []string{"b", "c", "d"} {
		out, err := h.add(att(id), nil)
		if err != nil {
			t.Errorf("ADD %s: %v", id, err)
			continue
		}
		ip := ipLines(parseResult(t, out))[0]
		if seen[ip] {
			t.Errorf("ADD %s: %s handed out twice", id, ip)
		}
		seen[ip] = true
	}
	s, err := leases.Read(h.leaseFile)
	if err != nil {
		t.Fatal(err)
	}
	macs := map[string]bool{}
	for _, l := range s.Leases() {
		if macs[l.MAC] {
			t.Errorf("MAC %s leased twice", l.MAC)
		}
		macs[l.MAC] = true
	}
}

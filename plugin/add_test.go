package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/google/go-cmp/cmp"
	"github.com/vmlane/vmlane/leases"
)

func TestPluginAdd(t *testing.T) {
	a := att("a")
	a.args = k8sArgs
	t.Run("plain", func(t *testing.T) {
		h := newHarness(t, nil)
		r := h.mustAdd(a, nil)
		h.wantState(concat(bridgeState, plainState("a", "10.244.3.2")))
		h.wantLeases("10.244.3.2 mac=02:76:0a:f4:03:02 reserved cni attachment=a/eth0 netns=/run/netns/a pod=default/web-0 uid=uid-a hostname=web-0")
		want := []string{"vmlane0 02:76:0a:f4:03:01 ", a.veth() + " " + fakeMAC("", a.veth()) + " ", "eth0 02:76:0a:f4:03:02 /run/netns/a"}
		if diff := cmp.Diff(want, ifaceLines(r)); diff != "" {
			t.Errorf("result interfaces (-want +got):\n%s", diff)
		}
		if got := ipLines(r); !slices.Equal(got, []string{"10.244.3.2/24 gw 10.244.3.1 on 2"}) {
			t.Errorf("result ips %q", got)
		}
	})
	t.Run("vm", func(t *testing.T) {
		h := newHarness(t, map[string]any{"vm": true})
		r := h.mustAdd(a, nil)
		h.wantState(concat(bridgeState, vmState("a", "10.244.3.2", "02:76:0a:f4:03:02")))
		h.wantLeases("10.244.3.2 mac=02:76:0a:f4:03:02 reserved cni attachment=a/eth0 netns=/run/netns/a pod=default/web-0 uid=uid-a hostname=web-0")
		want := []string{
			"vmlane0 02:76:0a:f4:03:01 ",
			a.veth() + " " + fakeMAC("", a.veth()) + " ",
			"eth0 " + fakeMAC("/run/netns/a", "eth0") + " /run/netns/a",
			"tap0 02:76:0a:f4:03:02 /run/netns/a",
		}
		if diff := cmp.Diff(want, ifaceLines(r)); diff != "" {
			t.Errorf("result interfaces (-want +got):\n%s", diff)
		}
		if got := ipLines(r); !slices.Equal(got, []string{"10.244.3.2/24 gw 10.244.3.1 on 2"}) { // on eth0, where runtimes read the pod IP
			t.Errorf("result ips %q", got)
		}
	})
	t.Run("multi-queue TAP", func(t *testing.T) {
		h := newHarness(t, map[string]any{"vm": true, "tapMultiQueue": true, "tapName": "vmtap", "mtu": 9000, "bridge": "br-vm"})
		h.mustAdd(att("a"), nil)
		if !slices.Contains(h.dp.state(), "ip -n /run/netns/a tuntap add vmtap mode tap vnet_hdr multi_queue") {
			t.Errorf("no multi-queue TAP named vmtap:\n%s", strings.Join(h.dp.state(), "\n"))
		}
		if !slices.Contains(h.dp.state(), "ip link set br-vm address 02:76:0a:f4:03:01 mtu 9000 up") {
			t.Errorf("bridge br-vm not at mtu 9000:\n%s", strings.Join(h.dp.state(), "\n"))
		}
	})
}

func ifaceLines(r *current.Result) []string {
	var out []string
	for _, i := range r.Interfaces {
		out = append(out, i.Name+" "+i.Mac+" "+i.Sandbox)
	}
	return out
}

func ipLines(r *current.Result) []string {
	var out []string
	for _, ip := range r.IPs {
		s := ip.Address.String() + " gw " + ip.Gateway.String()
		if ip.Interface != nil {
			s += fmt.Sprintf(" on %d", *ip.Interface)
		}
		out = append(out, s)
	}
	return out
}

// TestPluginAddEveryVersion: ADD prints nothing but a result of the
// config's version.
func TestPluginAddEveryVersion(t *testing.T) {
	for _, v := range specVersions {
		for _, vm := range []bool{false, true} {
			t.Run(modeName(vm)+"-"+v, func(t *testing.T) {
				h := newHarness(t, map[string]any{"cniVersion": v, "vm": vm})
				out, err := h.add(att("a"), nil)
				if err != nil {
					t.Fatal(err)
				}
				r := parseResult(t, out)
				var ver struct {
					CNIVersion string `json:"cniVersion"`
				}
				if err := json.Unmarshal([]byte(out), &ver); err != nil || ver.CNIVersion != v {
					t.Errorf("stdout cniVersion %q (%v), want %q", ver.CNIVersion, err, v)
				}
				if len(r.IPs) != 1 || r.IPs[0].Address.IP.String() != "10.244.3.2" {
					t.Errorf("result IPs %q", ipLines(r))
				}
			})
		}
	}
}

// TestPluginAddUndo fails every step of ADD that can fail, before and
// after the step did its work, and checks ADD leaves the node as it found
// it: no link, no lease for the attachment. Another attachment is in place
// first, so the bridge exists and must stay.
func TestPluginAddUndo(t *testing.T) {
	tests := []struct {
		step    string
		vm      bool
		partial bool
	}{
		{step: "EnsureBridge"},
		{step: "EnsureBridge", partial: true},
		{step: "EnableForwarding"},
		{step: "SetupVeth"},
		{step: "SetupVeth", vm: true},
		{step: "SetupVeth", partial: true},
		{step: "SetupVeth", vm: true, partial: true},
		{step: "ConfigureAddress"},
		{step: "ConfigureAddress", partial: true},
		{step: "SetupTap", vm: true},
		{step: "SetupTap", vm: true, partial: true},
		{step: "DeleteHostLink"}, // removing a stale veth
		{step: "Guard"},
		{step: "Guard", partial: true},
		{step: "Guard", vm: true, partial: true},
	}
	for _, tc := range tests {
		name := modeName(tc.vm) + "/" + tc.step
		if tc.partial {
			name += "/after-effect"
		}
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, map[string]any{"vm": tc.vm})
			h.mustAdd(att("other"), nil)
			state, leaseLines := h.dp.state(), h.leaseLines()

			h.dp.failNth(tc.step, 1, tc.partial)
			b := att("b")
			out, err := h.add(b, nil)
			if err == nil {
				t.Fatalf("ADD succeeded with %s failing", tc.step)
			}
			if !errors.Is(err, errInjected) {
				t.Errorf("error %v does not wrap the dataplane's", err)
			}
			if out != "" {
				t.Errorf("failed ADD printed %q", out)
			}
			h.wantState(state)
			if diff := cmp.Diff(leaseLines, h.leaseLines()); diff != "" {
				t.Errorf("leases (-before +after):\n%s", diff)
			}
			if _, ok := h.leaseOf(b); ok {
				t.Errorf("failed ADD left a lease")
			}
			if got := h.dp.linkNames(b.netns); len(got) != 0 {
				t.Errorf("failed ADD left links in the pod: %q", got)
			}

			// The attachment can be made once the fault is gone.
			h.mustAdd(b, nil)
			if _, ok := h.leaseOf(b); !ok {
				t.Errorf("no lease after the second ADD")
			}
		})
	}
}

// TestPluginAddUndoFreshNode: a failing first ADD on a node may leave the
// bridge (shared by every pod) but nothing of the attachment.
func TestPluginAddUndoFreshNode(t *testing.T) {
	for _, step := range []string{"EnsureBridge", "EnableForwarding", "Guard", "SetupVeth", "ConfigureAddress", "SetupTap"} {
		for _, partial := range []bool{false, true} {
			vm := step == "SetupTap"
			t.Run(fmt.Sprintf("%s/partial=%v", step, partial), func(t *testing.T) {
				h := newHarness(t, map[string]any{"vm": vm})
				h.dp.failNth(step, 1, partial)
				if _, err := h.add(att("a"), nil); err == nil {
					t.Fatalf("ADD succeeded with %s failing", step)
				}
				for _, l := range h.dp.linkNames("") {
					if l != "vmlane0" {
						t.Errorf("host netns keeps %s", l)
					}
				}
				if got := h.dp.linkNames("/run/netns/a"); len(got) != 0 {
					t.Errorf("pod netns keeps %q", got)
				}
				h.wantLeases()
			})
		}
	}
}

func TestPluginAddRetried(t *testing.T) {
	for _, vm := range []bool{false, true} {
		t.Run(modeName(vm), func(t *testing.T) {
			h := newHarness(t, map[string]any{"vm": vm})
			h.mustAdd(att("other"), nil)
			a := att("a")
			first := h.mustAdd(a, nil)
			state, leaseLines := h.dp.state(), h.leaseLines()
			second := h.mustAdd(a, nil)
			if diff := cmp.Diff(ipLines(first), ipLines(second)); diff != "" {
				t.Errorf("retried ADD gave another address (-first +retry):\n%s", diff)
			}
			h.wantState(state)
			if diff := cmp.Diff(leaseLines, h.leaseLines()); diff != "" {
				t.Errorf("leases (-first +retry):\n%s", diff)
			}
			if n := strings.Count(strings.Join(h.dp.linkNames(""), " "), a.veth()); n != 1 {
				t.Errorf("%d host veths for the attachment, want 1", n)
			}
		})
	}
}

// TestPluginAddAfterInterruptedAdd: an ADD killed halfway (no defer ran)
// leaves its lease, veth and TAP; the runtime's retry replaces them and
// ends where one clean ADD would.
func TestPluginAddAfterInterruptedAdd(t *testing.T) {
	for _, vm := range []bool{false, true} {
		t.Run(modeName(vm), func(t *testing.T) {
			h := newHarness(t, map[string]any{"vm": vm})
			a := att("a")
			// What the killed ADD did, a TAP with other flags included.
			h.dp.addNetns(a.netns)
			s, err := leases.Open(h.leaseFile, netip.MustParsePrefix("10.244.3.0/24"), netip.MustParseAddr("10.244.3.1"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Reserve(leases.ReserveRequest{Key: a.key(), MACFor: DeriveMAC, NetNS: a.netns}); err != nil {
				t.Fatal(err)
			}
			if _, err := h.dp.EnsureBridge("vmlane0", netip.MustParsePrefix("10.244.3.1/24"), 1500, "02:76:0a:f4:03:01"); err != nil {
				t.Fatal(err)
			}
			if _, _, err := h.dp.SetupVeth(a.netns, a.ifname, a.veth(), "vmlane0", 1500, "", false); err != nil {
				t.Fatal(err)
			}
			if vm {
				if _, err := h.dp.SetupTap(a.netns, "tap0", a.ifname, 1500, true); err != nil {
					t.Fatal(err)
				}
			}

			r := h.mustAdd(a, nil)
			want := concat(bridgeState, plainState("a", "10.244.3.2"))
			if vm {
				want = concat(bridgeState, vmState("a", "10.244.3.2", "02:76:0a:f4:03:02"))
			}
			h.wantState(want)
			h.wantLeases("10.244.3.2 mac=02:76:0a:f4:03:02 reserved cni attachment=a/eth0 netns=/run/netns/a")
			if got := r.IPs[0].Address.IP.String(); got != "10.244.3.2" {
				t.Errorf("retry got %s, the interrupted ADD reserved 10.244.3.2", got)
			}
		})
	}
}

// TestPluginAddRetriedFails: a retried ADD that fails keeps the lease the
// earlier ADD made; the runtime still owns it until DEL.
func TestPluginAddRetriedFails(t *testing.T) {
	for _, tc := range []struct {
		step string
		vm   bool
	}{
		{"DeleteHostLink", false},
		{"Guard", false},
		{"SetupVeth", false},
		{"ConfigureAddress", false},
		{"DeleteNetnsLinks", true},
		{"SetupVeth", true},
		{"SetupTap", true},
	} {
		step := tc.step
		t.Run(modeName(tc.vm)+"/"+step, func(t *testing.T) {
			h := newHarness(t, map[string]any{"vm": tc.vm})
			a := att("a")
			h.mustAdd(a, nil)
			before, _ := h.leaseOf(a)
			h.dp.failNth(step, 1, false)
			if _, err := h.add(a, nil); err == nil {
				t.Fatalf("retried ADD succeeded with %s failing", step)
			}
			after, ok := h.leaseOf(a)
			if !ok || after.IP != before.IP || after.MAC != before.MAC {
				t.Errorf("lease after the failed retry: %+v (held: %v), want %s %s", after, ok, before.IP, before.MAC)
			}
			// DEL then cleans up everything.
			if err := h.del(a, nil); err != nil {
				t.Fatal(err)
			}
			h.wantDetached(expand(bridgeState...))
			h.wantLeases()
		})
	}
}

// TestPluginAddRetriedConflict: a retry asking for another address than
// the attachment holds is refused, and the held lease stays.
func TestPluginAddRetriedConflict(t *testing.T) {
	h := newHarness(t, nil)
	a := att("a")
	h.mustAdd(a, nil)
	leaseLines := h.leaseLines()
	_, err := h.add(a, map[string]any{"runtimeConfig": map[string]any{"ips": []string{"10.244.3.50/24"}}})
	wantCode(t, err, types.ErrInvalidNetworkConfig, "10.244.3.2", "10.244.3.50")
	if diff := cmp.Diff(leaseLines, h.leaseLines()); diff != "" {
		t.Errorf("leases (-before +after):\n%s", diff)
	}
}

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

package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/types/create"
	"github.com/google/go-cmp/cmp"
	"github.com/vmlane/vmlane/internal/antispoof"
	"github.com/vmlane/vmlane/leases"
)

// captureStdout runs fn with os.Stdout redirected to a pipe and returns
// what fn printed. Tests that use it must not run in parallel.
func captureStdout(t *testing.T, fn func() error) (string, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(r)
		out <- b
	}()
	saved := os.Stdout
	os.Stdout = w
	defer func() { os.Stdout = saved }()
	ferr := fn()
	os.Stdout = saved
	w.Close()
	b := <-out
	r.Close()
	return string(b), ferr
}

// harness is a Plugin over a fake dataplane and a lease file of its own.
type harness struct {
	t         *testing.T
	dp        *fakeDataplane
	p         *Plugin
	stderr    bytes.Buffer
	leaseFile string
	set       map[string]any // merged into every config
}

func newHarness(t *testing.T, set map[string]any) *harness {
	h := &harness{t: t, dp: newFakeDataplane(), leaseFile: filepath.Join(t.TempDir(), "leases.json")}
	h.p = &Plugin{dp: h.dp, stderr: &h.stderr}
	h.set = map[string]any{"leaseFile": h.leaseFile}
	for k, v := range set {
		h.set[k] = v
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("plugin log:\n%s", h.stderr.String())
		}
	})
	return h
}

// conf is the harness's network config with extra merged over it.
func (h *harness) conf(extra map[string]any) []byte {
	m := make(map[string]any, len(h.set)+len(extra))
	for k, v := range h.set {
		m[k] = v
	}
	for k, v := range extra {
		m[k] = v
	}
	return netconf(h.t, m)
}

// attachment is one pod interface the tests attach.
type attachment struct {
	id, ifname, netns string
	args              string // CNI_ARGS
}

func att(id string) attachment {
	return attachment{id: id, ifname: "eth0", netns: "/run/netns/" + id}
}

func (a attachment) key() leases.Key { return leases.Key{ContainerID: a.id, IfName: a.ifname} }
func (a attachment) veth() string    { return HostVethName(a.key()) }

func (a attachment) cmdArgs(conf []byte) *skel.CmdArgs {
	return &skel.CmdArgs{ContainerID: a.id, Netns: a.netns, IfName: a.ifname, Args: a.args, StdinData: conf}
}

// add runs ADD (creating the netns first) and returns what it printed.
func (h *harness) add(a attachment, extra map[string]any) (string, error) {
	h.t.Helper()
	h.dp.addNetns(a.netns)
	return captureStdout(h.t, func() error { return h.p.Add(a.cmdArgs(h.conf(extra))) })
}

// mustAdd runs ADD, which must succeed, and returns the parsed result.
func (h *harness) mustAdd(a attachment, extra map[string]any) *current.Result {
	h.t.Helper()
	out, err := h.add(a, extra)
	if err != nil {
		h.t.Fatalf("ADD %s: %v", a.id, err)
	}
	return parseResult(h.t, out)
}

// mustAddPrev runs ADD, which must succeed, and returns its result as a
// later CHECK's prevResult.
func (h *harness) mustAddPrev(a attachment) map[string]any {
	h.t.Helper()
	out, err := h.add(a, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	var prev map[string]any
	if err := json.Unmarshal([]byte(out), &prev); err != nil {
		h.t.Fatal(err)
	}
	return prev
}

// other runs a verb that must print nothing.
func (h *harness) other(verb string, fn func(*skel.CmdArgs) error, a attachment, extra map[string]any) error {
	h.t.Helper()
	out, err := captureStdout(h.t, func() error { return fn(a.cmdArgs(h.conf(extra))) })
	if out != "" {
		h.t.Errorf("%s printed %q on stdout; only ADD prints, and only its result", verb, out)
	}
	return err
}

func (h *harness) del(a attachment, extra map[string]any) error {
	return h.other("DEL", h.p.Del, a, extra)
}

// parseResult parses stdout as exactly one CNI result.
func parseResult(t *testing.T, out string) *current.Result {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		t.Fatalf("stdout is not a JSON result: %v\n%s", err, out)
	}
	if rest, _ := io.ReadAll(dec.Buffered()); len(bytes.TrimSpace(rest)) > 0 || dec.More() {
		t.Fatalf("stdout holds more than the result: %q", out)
	}
	r, err := create.CreateFromBytes(raw)
	if err != nil {
		t.Fatalf("stdout is not a CNI result: %v\n%s", err, out)
	}
	cur, err := current.NewResultFromResult(r)
	if err != nil {
		t.Fatal(err)
	}
	return cur
}

// leaseLines prints the lease file's leases, one line each ("" fields
// left out). A missing file has none.
func (h *harness) leaseLines() []string {
	h.t.Helper()
	s, err := leases.Read(h.leaseFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		h.t.Fatalf("reading lease file: %v", err)
	}
	var out []string
	for _, l := range s.Leases() {
		line := fmt.Sprintf("%s mac=%s %s %s", l.IP, l.MAC, l.State, l.Source)
		for _, kv := range [][2]string{
			{"attachment", l.Key().String()}, {"netns", l.NetNS}, {"pod", l.Pod.Namespace + "/" + l.Pod.Name},
			{"uid", l.Pod.UID}, {"hostname", l.Hostname},
		} {
			if kv[1] != "" && kv[1] != "/" {
				line += " " + kv[0] + "=" + kv[1]
			}
		}
		if !l.Expires.IsZero() {
			line += " expires"
		}
		out = append(out, line)
	}
	return out
}

// leaseOf returns the lease of an attachment.
func (h *harness) leaseOf(a attachment) (leases.Lease, bool) {
	h.t.Helper()
	s, err := leases.Read(h.leaseFile)
	if errors.Is(err, fs.ErrNotExist) {
		return leases.Lease{}, false
	}
	if err != nil {
		h.t.Fatal(err)
	}
	for _, l := range s.Leases() {
		if l.Source == leases.SourceCNI && l.Key() == a.key() {
			return l, true
		}
	}
	return leases.Lease{}, false
}

// expand fills the {veth:ID} placeholders of expected state lines with
// HostVethName of attachment ID/eth0, and sorts the lines as state does.
func expand(lines ...string) []string {
	out := make([]string, 0, len(lines))
	for _, l := range lines {
		for {
			i := strings.Index(l, "{veth:")
			if i < 0 {
				break
			}
			j := strings.Index(l[i:], "}")
			id := l[i+len("{veth:") : i+j]
			l = l[:i] + att(id).veth() + l[i+j+1:]
		}
		out = append(out, l)
	}
	slices.Sort(out)
	return out
}

// bridgeState is the fake's state after any ADD on the default config.
var bridgeState = []string{
	"ip addr add 10.244.3.1/24 dev vmlane0",
	"ip link add vmlane0 type bridge",
	"ip link set vmlane0 address 02:76:0a:f4:03:01 mtu 1500 up",
	"sysctl -w net.ipv4.ip_forward=1",
}

// guardState is the anti-spoofing entry of attachment id.
func guardState(id, mac, ip string) string {
	return "nft add element bridge vmlane addrs { {veth:" + id + "} . " + mac + " . " + ip + " }"
}

func plainState(id, ip string) []string {
	ns := "/run/netns/" + id
	return []string{
		guardState(id, DeriveMAC(netip.MustParseAddr(ip)), ip),
		"ip link add {veth:" + id + "} type veth peer name eth0 netns " + ns,
		"ip link set {veth:" + id + "} master vmlane0 mtu 1500 up",
		"ip -n " + ns + " link set eth0 address " + DeriveMAC(netip.MustParseAddr(ip)) + " mtu 1500 up",
		"ip -n " + ns + " addr add " + ip + "/24 dev eth0",
		"ip -n " + ns + " route add default via 10.244.3.1 dev eth0",
	}
}

// vmState is VM attachment id's state; mac is its guest's (and lease's).
func vmState(id, ip, mac string) []string {
	ns := "/run/netns/" + id
	return []string{
		guardState(id, mac, ip),
		"ip link add {veth:" + id + "} type veth peer name eth0 netns " + ns,
		"ip link set {veth:" + id + "} master vmlane0 mtu 1500 up",
		"ip -n " + ns + " link set eth0 mtu 1500 addrgenmode none up",
		"ip -n " + ns + " tuntap add tap0 mode tap vnet_hdr one_queue",
		"ip -n " + ns + " link set tap0 mtu 1500 addrgenmode none up",
		"tc -n " + ns + " qdisc add dev eth0 ingress",
		"tc -n " + ns + " filter add dev eth0 ingress prio 1 protocol all u32 match u32 0 0 action mirred egress redirect dev tap0",
		"tc -n " + ns + " qdisc add dev tap0 ingress",
		"tc -n " + ns + " filter add dev tap0 ingress prio 1 protocol all u32 match u32 0 0 action mirred egress redirect dev eth0",
	}
}

func concat(parts ...[]string) []string { return expand(slices.Concat(parts...)...) }

func (h *harness) wantState(want []string) {
	h.t.Helper()
	if diff := cmp.Diff(want, h.dp.state()); diff != "" {
		h.t.Errorf("dataplane state (-want +got):\n%s", diff)
	}
}

// wantDetached is wantState after a DEL: the anti-spoofing entries of
// detached attachments stay for vmlaned to sweep (see Del), so they are
// left out of the comparison, but only those whose port has neither a
// link nor a lease naming it.
func (h *harness) wantDetached(want []string) {
	h.t.Helper()
	named := map[string]bool{}
	if s, err := leases.Read(h.leaseFile); err == nil {
		for _, l := range s.Leases() {
			named[l.BridgePort] = true
		}
	}
	var got []string
	for _, line := range h.dp.state() {
		if port, ok := strings.CutPrefix(line, "nft add element bridge vmlane addrs { "); ok {
			port, _, _ = strings.Cut(port, " ")
			if !named[port] && !h.dp.hasLink("", port) {
				continue
			}
		}
		got = append(got, line)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		h.t.Errorf("dataplane state but stale anti-spoofing entries (-want +got):\n%s", diff)
	}
}

func (h *harness) wantLeases(want ...string) {
	h.t.Helper()
	if diff := cmp.Diff(want, h.leaseLines()); diff != "" {
		h.t.Errorf("leases (-want +got):\n%s", diff)
	}
}

func wantCode(t *testing.T, err error, code uint, words ...string) *types.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want CNI error %d", code)
	}
	e := cniError(t, err)
	if e.Code != code {
		t.Errorf("error code %d, want %d: %v", e.Code, code, e)
	}
	for _, w := range words {
		if !strings.Contains(e.Error(), w) {
			t.Errorf("error %q does not mention %q", e.Error(), w)
		}
	}
	return e
}

const k8sArgs = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=a;K8S_POD_UID=uid-a"

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

func TestPluginDel(t *testing.T) {
	for _, vm := range []bool{false, true} {
		t.Run(modeName(vm)+"/twice", func(t *testing.T) {
			h := newHarness(t, map[string]any{"vm": vm})
			h.mustAdd(att("other"), nil)
			want, wantLeases := h.dp.state(), h.leaseLines()
			a := att("a")
			h.mustAdd(a, nil)
			for i := range 2 {
				if err := h.del(a, nil); err != nil {
					t.Fatalf("DEL #%d: %v", i+1, err)
				}
				h.wantDetached(want)
				if diff := cmp.Diff(wantLeases, h.leaseLines()); diff != "" {
					t.Errorf("leases after DEL #%d (-want +got):\n%s", i+1, diff)
				}
			}
		})
		t.Run(modeName(vm)+"/netns gone", func(t *testing.T) {
			h := newHarness(t, map[string]any{"vm": vm})
			a := att("a")
			h.mustAdd(a, nil)
			h.dp.removeNetns(a.netns)
			if err := h.del(a, nil); err != nil {
				t.Fatal(err)
			}
			h.wantDetached(expand(bridgeState...))
			h.wantLeases()
		})
		t.Run(modeName(vm)+"/netns gone, host veth left", func(t *testing.T) {
			// The pod end vanished some other way; the host end lingers.
			h := newHarness(t, map[string]any{"vm": vm})
			a := att("a")
			h.mustAdd(a, nil)
			h.dp.mu.Lock()
			delete(h.dp.netns, a.netns)
			for k := range h.dp.links {
				if k.netns == a.netns {
					delete(h.dp.links, k)
				}
			}
			h.dp.mu.Unlock()
			if err := h.del(a, nil); err != nil {
				t.Fatal(err)
			}
			h.wantDetached(expand(bridgeState...))
			h.wantLeases()
		})
		t.Run(modeName(vm)+"/no CNI_NETNS", func(t *testing.T) {
			h := newHarness(t, map[string]any{"vm": vm})
			a := att("a")
			h.mustAdd(a, nil)
			a.netns = ""
			if err := h.del(a, nil); err != nil {
				t.Fatal(err)
			}
			if h.dp.hasLink("", a.veth()) {
				t.Errorf("host veth %s left", a.veth())
			}
			h.wantLeases()
		})
	}
	t.Run("never added", func(t *testing.T) {
		h := newHarness(t, nil)
		a := att("a")
		h.dp.addNetns(a.netns)
		if err := h.del(a, nil); err != nil {
			t.Fatal(err)
		}
		h.wantLeases()
	})
	t.Run("never added, netns gone", func(t *testing.T) {
		h := newHarness(t, nil)
		if err := h.del(att("a"), nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("link deletion fails: lease kept", func(t *testing.T) {
		// Links first, then the lease: the address must not be reused
		// while an interface may still answer for it.
		h := newHarness(t, nil)
		a := att("a")
		h.mustAdd(a, nil)
		h.dp.failNth("DeleteHostLink", 1, false)
		if err := h.del(a, nil); err == nil {
			t.Fatal("DEL succeeded though the veth could not be deleted")
		}
		if _, ok := h.leaseOf(a); !ok {
			t.Error("DEL released the lease of a veth it could not delete")
		}
		if err := h.del(a, nil); err != nil {
			t.Fatal(err)
		}
		h.wantLeases()
	})
	t.Run("podCIDR changed under the pod", func(t *testing.T) {
		// vmlaned rewrote the conflist for the node's new podCIDR; the
		// pod's DEL comes with it, and the lease file still holds the
		// old subnet's leases. Found by containerd: the pod stayed
		// Terminating until the lease file was changed by hand.
		h := newHarness(t, nil)
		a, b := att("a"), att("b")
		h.mustAdd(a, nil)
		h.mustAdd(b, nil)
		moved := map[string]any{"subnet": "10.244.9.0/24"}
		if err := h.del(a, moved); err != nil {
			t.Fatalf("DEL after a podCIDR change: %v", err)
		}
		if h.dp.hasLink("", a.veth()) {
			t.Errorf("host veth %s left", a.veth())
		}
		h.wantLeases("10.244.3.3 mac=02:76:0a:f4:03:03 reserved cni attachment=b/eth0 netns=/run/netns/b")
		if err := h.del(b, moved); err != nil {
			t.Fatalf("DEL of the last old pod: %v", err)
		}
		h.wantLeases()
		// With the old subnet's leases gone, the new subnet is adopted.
		if r := h.mustAdd(att("c"), moved); r.IPs[0].Address.IP.String() != "10.244.9.2" {
			t.Errorf("ADD in the new subnet got %s, want 10.244.9.2", r.IPs[0].Address.IP)
		}
	})
	t.Run("lease file unreadable", func(t *testing.T) {
		// The links go and DEL succeeds; the file is left as it is for
		// the operator, who may still recover its leases.
		h := newHarness(t, nil)
		a := att("a")
		h.mustAdd(a, nil)
		junk := []byte("{not a lease file")
		if err := os.WriteFile(h.leaseFile, junk, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := h.del(a, nil); err != nil {
			t.Fatalf("DEL with an unreadable lease file: %v", err)
		}
		if h.dp.hasLink("", a.veth()) {
			t.Errorf("host veth %s left", a.veth())
		}
		if got, _ := os.ReadFile(h.leaseFile); !bytes.Equal(got, junk) {
			t.Errorf("DEL wrote over the unreadable lease file: %q", got)
		}
		if !strings.Contains(h.stderr.String(), "lease file unreadable") {
			t.Errorf("DEL did not log the unreadable file; log:\n%s", h.stderr.String())
		}
	})
	t.Run("bad config", func(t *testing.T) {
		h := newHarness(t, nil)
		err := h.del(att("a"), map[string]any{"mtu": 1})
		wantCode(t, err, types.ErrInvalidNetworkConfig, "mtu")
	})
}

// TestPluginDelKeepsOthers: DEL of one attachment leaves the others'
// links and leases alone, including another interface of the same
// container.
func TestPluginDelKeepsOthers(t *testing.T) {
	h := newHarness(t, nil)
	a, b, a2 := att("a"), att("b"), att("a")
	a2.ifname = "net1"
	h.mustAdd(b, nil)
	h.mustAdd(a2, nil)
	want, wantLeases := h.dp.state(), h.leaseLines()
	h.mustAdd(a, nil)
	if err := h.del(a, nil); err != nil {
		t.Fatal(err)
	}
	h.wantDetached(want)
	if diff := cmp.Diff(wantLeases, h.leaseLines()); diff != "" {
		t.Errorf("leases (-want +got):\n%s", diff)
	}
}

func gcConf(valid ...attachment) map[string]any {
	list := []map[string]string{}
	for _, a := range valid {
		list = append(list, map[string]string{"containerID": a.id, "ifname": a.ifname})
	}
	return map[string]any{"cni.dev/valid-attachments": list}
}

func TestPluginGC(t *testing.T) {
	h := newHarness(t, map[string]any{"vm": true})
	a, b, c := att("a"), att("b"), att("c")
	h.mustAdd(a, nil)
	h.mustAdd(b, nil)
	h.mustAdd(c, nil)
	// A VM the DHCP server leased to on its own: GC leaves it to expiry.
	s, err := leases.Open(h.leaseFile, netip.MustParsePrefix("10.244.3.0/24"), netip.MustParseAddr("10.244.3.1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve(leases.ReserveRequest{MAC: "02:00:00:00:00:99", IP: netip.MustParseAddr("10.244.3.99")}); err != nil {
		t.Fatal(err)
	}
	// The pods of a and c are gone; their netns went, their host veths
	// with them in the kernel, but leave one behind to see GC remove it.
	h.dp.removeNetns(a.netns)
	h.dp.mu.Lock()
	delete(h.dp.netns, c.netns)
	for k := range h.dp.links {
		if k.netns == c.netns {
			delete(h.dp.links, k)
		}
	}
	h.dp.mu.Unlock()
	if !h.dp.hasLink("", c.veth()) {
		t.Fatal("setup: c's host veth should linger")
	}

	calls := len(h.dp.callLog())
	if err := h.other("GC", h.p.GC, attachment{}, gcConf(b)); err != nil {
		t.Fatal(err)
	}
	h.wantState(concat(bridgeState, vmState("b", "10.244.3.3", "02:76:0a:f4:03:03")))
	h.wantLeases(
		"10.244.3.3 mac=02:76:0a:f4:03:03 reserved cni attachment=b/eth0 netns=/run/netns/b",
		"10.244.3.99 mac=02:00:00:00:00:99 reserved dhcp",
	)
	wantCalls := []string{"DeleteHostLink(" + a.veth() + ")", "DeleteHostLink(" + c.veth() + ")", "Guarded()", "Unguard(" + a.veth() + ", " + c.veth() + ")"}
	slices.Sort(wantCalls)
	if diff := cmp.Diff(wantCalls, slices.Sorted(slices.Values(h.dp.callLog()[calls:]))); diff != "" {
		t.Errorf("GC's dataplane calls (-want +got):\n%s", diff)
	}

	// Again: nothing left to do.
	if err := h.other("GC", h.p.GC, attachment{}, gcConf(b)); err != nil {
		t.Fatal(err)
	}
	// No valid attachment at all: everything of CNI goes. (b's TAP stays
	// in b's netns: GC removes host veths only, and a pod the runtime has
	// forgotten has lost its netns too.)
	if err := h.other("GC", h.p.GC, attachment{}, nil); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"vmlane0"}, h.dp.linkNames("")); diff != "" {
		t.Errorf("host links (-want +got):\n%s", diff)
	}
	h.wantLeases("10.244.3.99 mac=02:00:00:00:00:99 reserved dhcp")
}

// TestPluginGCLinkFailure: GC, like DEL, must not free an address whose
// veth it could not delete.
func TestPluginGCLinkFailure(t *testing.T) {
	h := newHarness(t, nil)
	a, b := att("a"), att("b")
	h.mustAdd(a, nil)
	h.mustAdd(b, nil)
	h.dp.failNth("DeleteHostLink", 1, false) // a's
	if err := h.other("GC", h.p.GC, attachment{}, gcConf()); err == nil {
		t.Error("GC reported success though a veth could not be deleted")
	}
	if _, ok := h.leaseOf(a); !ok {
		t.Error("GC released a's lease though it could not delete a's veth")
	}
	if _, ok := h.leaseOf(b); ok {
		t.Error("GC kept b's lease")
	}
}

func TestPluginStatus(t *testing.T) {
	status := func(h *harness, extra map[string]any) error {
		return h.other("STATUS", h.p.Status, attachment{}, extra)
	}
	t.Run("ok", func(t *testing.T) {
		h := newHarness(t, nil)
		h.mustAdd(att("a"), nil)
		if err := status(h, nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("bridge missing", func(t *testing.T) {
		h := newHarness(t, nil)
		wantCode(t, status(h, nil), errPluginNotAvailable, "vmlane0")
	})
	t.Run("bridge down", func(t *testing.T) {
		h := newHarness(t, nil)
		h.mustAdd(att("a"), nil)
		h.dp.setUp("", "vmlane0", false)
		wantCode(t, status(h, nil), errPluginNotAvailable, "vmlane0", "down")
	})
	t.Run("bridge name taken", func(t *testing.T) {
		h := newHarness(t, map[string]any{"bridge": "eth0"})
		h.dp.addForeignLink("eth0", "device")
		wantCode(t, status(h, nil), errPluginNotAvailable, "eth0")
	})
	t.Run("subnet full", func(t *testing.T) {
		h := newHarness(t, map[string]any{"subnet": "10.244.3.0/30"})
		h.mustAdd(att("a"), nil)
		wantCode(t, status(h, nil), errPluginNotAvailable, "10.244.3.0/30", "full")
	})
	t.Run("rest excluded", func(t *testing.T) {
		h := newHarness(t, map[string]any{"subnet": "10.244.3.0/29", "excludeRange": "10.244.3.3-10.244.3.6"})
		h.mustAdd(att("a"), nil)
		wantCode(t, status(h, nil), errPluginNotAvailable, "10.244.3.0/29", "full")
	})
	t.Run("corrupt lease file", func(t *testing.T) {
		h := newHarness(t, nil)
		h.mustAdd(att("a"), nil)
		if err := os.WriteFile(h.leaseFile, []byte(`{"version":1,"subnet":"10.244.3.0/24","leases":[{"ip":"10.244.3.2","mac":"x"`), 0o644); err != nil {
			t.Fatal(err)
		}
		wantCode(t, status(h, nil), errPluginNotAvailable)
	})
	t.Run("lease file of another subnet", func(t *testing.T) {
		h := newHarness(t, nil)
		h.mustAdd(att("a"), nil)
		wantCode(t, status(h, map[string]any{"subnet": "10.244.9.0/24"}), errPluginNotAvailable)
	})
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

// addForCheck runs ADD, which must succeed, and returns a CHECK of its
// result.
func (h *harness) addForCheck(a attachment) func() error {
	h.t.Helper()
	prev := h.mustAddPrev(a)
	return func() error { return h.other("CHECK", h.p.Check, a, map[string]any{"prevResult": prev}) }
}

// TestPluginCheck: CHECK accepts what ADD built, given ADD's result, and
// reports what went missing since.
func TestPluginCheck(t *testing.T) {
	for _, vm := range []bool{false, true} {
		for _, v := range []string{"0.4.0", "1.0.0", "1.1.0"} {
			t.Run(modeName(vm)+"-"+v, func(t *testing.T) {
				h := newHarness(t, map[string]any{"vm": vm, "cniVersion": v})
				a := att("a")
				check := h.addForCheck(a)
				if err := check(); err != nil {
					t.Fatalf("CHECK after ADD: %v", err)
				}
				if vm {
					h.dp.deleteLink(a.netns, "tap0")
				} else {
					h.dp.setUp("", a.veth(), false)
				}
				if err := check(); err == nil {
					t.Error("CHECK passed on a broken attachment")
				}
				if err := h.del(a, nil); err != nil {
					t.Fatal(err)
				}
				if err := check(); err == nil {
					t.Error("CHECK passed after DEL")
				}
			})
		}
	}
}

func TestPluginAntiSpoof(t *testing.T) {
	t.Run("off", func(t *testing.T) {
		h := newHarness(t, map[string]any{"antiSpoof": false})
		a := att("a")
		check := h.addForCheck(a)
		want := plainState("a", "10.244.3.2")[1:] // no guard line
		h.wantState(concat(bridgeState, want))
		if l, _ := h.leaseOf(a); l.BridgePort != "" {
			t.Errorf("lease names bridge port %q with anti-spoofing off", l.BridgePort)
		}
		if err := check(); err != nil {
			t.Errorf("CHECK with anti-spoofing off: %v", err)
		}
		if err := h.del(a, nil); err != nil {
			t.Fatal(err)
		}
		for _, c := range h.dp.callLog() {
			if strings.Contains(c, "uard") {
				t.Errorf("anti-spoofing off, yet the plugin called %s", c)
			}
		}
	})
	t.Run("check", func(t *testing.T) {
		h := newHarness(t, map[string]any{"vm": true})
		a := att("a")
		check := h.addForCheck(a)
		if err := check(); err != nil {
			t.Fatalf("CHECK after ADD: %v", err)
		}
		if l, _ := h.leaseOf(a); l.BridgePort != a.veth() {
			t.Errorf("lease names bridge port %q, want %s", l.BridgePort, a.veth())
		}
		mac, _ := net.ParseMAC("02:76:0a:f4:03:09")
		for name, change := range map[string]func() error{
			"removed": func() error { return h.dp.Unguard(a.veth()) },
			"other address": func() error {
				return h.dp.Guard(antispoof.Port{Name: a.veth(), MAC: mac, IP: netip.MustParseAddr("10.244.3.9")})
			},
		} {
			if err := change(); err != nil {
				t.Fatal(err)
			}
			if err := check(); err == nil || !strings.Contains(err.Error(), "anti-spoofing") {
				t.Errorf("CHECK with the port's anti-spoofing %s = %v, want it named", name, err)
			}
		}
		if err := h.del(a, nil); err != nil {
			t.Fatal(err)
		}
		h.wantDetached(expand(bridgeState...))
	})
	t.Run("DEL leaves the entry, GC sweeps it", func(t *testing.T) {
		h := newHarness(t, nil)
		a, b := att("a"), att("b")
		h.mustAdd(a, nil)
		h.mustAdd(b, nil)
		if err := h.del(a, nil); err != nil {
			t.Fatal(err)
		}
		h.wantState(concat(bridgeState, []string{guardState("a", "02:76:0a:f4:03:02", "10.244.3.2")}, plainState("b", "10.244.3.3")))
		if err := h.other("GC", h.p.GC, attachment{}, gcConf(b)); err != nil {
			t.Fatal(err)
		}
		h.wantState(concat(bridgeState, plainState("b", "10.244.3.3")))
	})
	t.Run("no kernel support", func(t *testing.T) {
		h := newHarness(t, nil)
		h.dp.guardErr = antispoof.ErrNoKernelSupport
		_, err := h.add(att("a"), nil)
		wantCode(t, err, types.ErrInvalidNetworkConfig, "antiSpoof", "nftables", `"antiSpoof": false`)
		h.wantState(expand(bridgeState...))
		h.wantLeases()
	})
	t.Run("not a bool", func(t *testing.T) {
		h := newHarness(t, map[string]any{"antiSpoof": "yes"})
		_, err := h.add(att("a"), nil)
		wantCode(t, err, types.ErrDecodingFailure, "antiSpoof")
	})
}

package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
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
			{"uid", l.Pod.UID}, {"hostname", l.Hostname}, {"vm", l.VMName},
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
	"ip link set vmlane0 address 02:76:00:00:00:01 mtu 1500 up",
	"sysctl -w net.ipv4.ip_forward=1",
}

// guardState is the anti-spoofing entry of attachment id.
func guardState(id, mac, ip string) string {
	return "nft add element bridge vmlane addrs { {veth:" + id + "} . " + mac + " . " + ip + " }"
}

// chainState is the ingress chain on attachment id's host veth.
func chainState(id string) string {
	return "nft add chain netdev vmlane {veth:" + id + "} { type filter hook ingress device {veth:" + id + "} priority -500; }"
}

func plainState(id, ip string) []string {
	ns := "/run/netns/" + id
	return []string{
		guardState(id, DeriveMAC(netip.MustParseAddr(ip)), ip),
		chainState(id),
		"ip link add {veth:" + id + "} type veth peer name eth0 netns " + ns,
		"ip link set {veth:" + id + "} master vmlane0 mtu 1500 up",
		"bridge link set dev {veth:" + id + "} hairpin on",
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
		chainState(id),
		"ip link add {veth:" + id + "} type veth peer name eth0 netns " + ns,
		"ip link set {veth:" + id + "} master vmlane0 mtu 1500 up",
		"bridge link set dev {veth:" + id + "} hairpin on",
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
		_, rest, ok := strings.Cut(line, "nft add element bridge vmlane addrs")
		if port, ok2 := strings.CutPrefix(strings.TrimPrefix(rest, "6"), " { "); ok && ok2 {
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

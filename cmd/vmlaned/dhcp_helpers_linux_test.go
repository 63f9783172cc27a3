package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/privtest"
	"github.com/vmlane/vmlane/leases"
	"github.com/vmlane/vmlane/plugin"
)

// standalone is vmlaned running standalone in a node namespace, restartable
// with the same flags.
type standalone struct {
	bin       string
	node      *netnstest.NS
	args      []string
	leaseFile string
	confDir   string
	logs      syncBuffer // every run's stderr, in order
	cmd       *exec.Cmd
	exited    chan struct{} // closed when cmd has been waited for
}

// startStandalone runs `vmlaned --pod-cidr podCIDR` with its lease file and
// conflists in a temporary folder, plus extra flags, and waits until its
// DHCP server is up. It is killed when t ends; its log is printed if t
// failed.
func startStandalone(t *testing.T, bin string, node *netnstest.NS, podCIDR string, extra ...string) *standalone {
	t.Helper()
	dir := t.TempDir()
	d := &standalone{bin: bin, node: node, leaseFile: filepath.Join(dir, "leases.json"), confDir: filepath.Join(dir, "net.d")}
	d.args = append([]string{"--pod-cidr", podCIDR, "--cni-conf-dir", d.confDir, "--lease-file", d.leaseFile,
		"--health-addr", "127.0.0.1:19465", "--metrics-addr", "127.0.0.1:19464"}, extra...)
	t.Cleanup(func() {
		d.kill()
		if t.Failed() {
			t.Logf("vmlaned log:\n%s", d.logs.String())
		}
	})
	d.start(t)
	return d
}

// start runs vmlaned (again) and waits for this run's "DHCP server up".
func (d *standalone) start(t *testing.T) {
	t.Helper()
	before := strings.Count(d.logs.String(), "DHCP server up")
	d.cmd = d.node.Command(filepath.Join(d.bin, "vmlaned"), d.args...)
	d.cmd.Stderr = &d.logs
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cmd, exited := d.cmd, make(chan struct{})
	d.exited = exited
	go func() { cmd.Wait(); close(exited) }()
	for deadline := time.Now().Add(20 * time.Second); strings.Count(d.logs.String(), "DHCP server up") == before; time.Sleep(50 * time.Millisecond) {
		select {
		case <-exited:
			t.Fatalf("vmlaned exited before its DHCP server was up:\n%s", d.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("vmlaned did not start its DHCP server:\n%s", d.logs.String())
		}
	}
}

// kill SIGKILLs vmlaned, as a crash or an OOM kill would, and waits until
// it is gone.
func (d *standalone) kill() {
	if d.cmd == nil || d.cmd.Process == nil {
		return
	}
	d.cmd.Process.Kill()
	<-d.exited
	d.cmd = nil
}

// waitLog waits for a line of vmlaned's log that matches.
func (d *standalone) waitLog(t *testing.T, what string, match func(line string) bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		for _, line := range strings.Split(d.logs.String(), "\n") {
			if match(line) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("vmlaned never logged %s", what)
		}
	}
}

// cniAdd runs the CNI plugin's ADD with vmlaned's VM conflist the way a
// runtime does (the network's one plugin config, with cniVersion and name,
// on stdin) for pod default/podName in netns pod, and returns the result's
// TAP (the VM NIC's MAC) and reserved address.
func (d *standalone) cniAdd(t *testing.T, pod *netnstest.NS, containerID, podName string) (tap *current.Interface, ip string) {
	t.Helper()
	res := d.cniAddResult(t, pod, containerID, podName)
	// The IP names the pod veth (CNI_IFNAME); the TAP, with the guest's
	// MAC, comes last.
	return res.Interfaces[len(res.Interfaces)-1], res.IPs[0].Address.IP.String()
}

// cniAddResult is cniAdd's whole result: on a dual-stack node its second
// IP is the attachment's IPv6 address.
func (d *standalone) cniAddResult(t *testing.T, pod *netnstest.NS, containerID, podName string) *current.Result {
	t.Helper()
	return d.cniAddIf(t, pod, containerID, podName, "eth0")
}

// cniAddIf is cniAddResult with the pod interface named ifName.
func (d *standalone) cniAddIf(t *testing.T, pod *netnstest.NS, containerID, podName, ifName string) *current.Result {
	t.Helper()
	out := d.cni(t, "ADD", pod, containerID, podName, ifName)
	var res current.Result
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("CNI result: %v\n%s", err, out)
	}
	if len(res.IPs) == 0 || res.IPs[0].Interface == nil {
		t.Fatalf("CNI result without an IP on an interface: %s", out)
	}
	return &res
}

// cniDel is the runtime's DEL of an attachment cniAddIf made.
func (d *standalone) cniDel(t *testing.T, pod *netnstest.NS, containerID, ifName string) {
	t.Helper()
	d.cni(t, "DEL", pod, containerID, "", ifName)
}

// cni runs the plugin with vmlaned's VM conflist, as a runtime runs it,
// and returns its stdout.
func (d *standalone) cni(t *testing.T, command string, pod *netnstest.NS, containerID, podName, ifName string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(d.confDir, VMConflistName))
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		CNIVersion string            `json:"cniVersion"`
		Name       string            `json:"name"`
		Plugins    []json.RawMessage `json:"plugins"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatal(err)
	}
	conf := strings.Replace(string(list.Plugins[0]), "{", `{"cniVersion":"`+list.CNIVersion+`","name":"`+list.Name+`",`, 1)
	run := d.node.Command(filepath.Join(d.bin, "vmlane"))
	run.Env = append(os.Environ(), "CNI_COMMAND="+command, "CNI_CONTAINERID="+containerID, "CNI_NETNS="+pod.Path, "CNI_IFNAME="+ifName,
		"CNI_PATH="+d.bin, "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME="+podName)
	run.Stdin = strings.NewReader(conf)
	var stderr strings.Builder
	run.Stderr = &stderr
	out, err := run.Output()
	if err != nil {
		t.Fatalf("CNI %s: %v\n%s%s", command, err, out, stderr.String())
	}
	return out
}

// bridgePort makes a namespace whose eth0, with MAC mac, is a port of the
// node's bridge vmlane0 through the veth hostIf in the node namespace: a
// stand-in for a VM's NIC, where a real DHCP client (or a squatter) runs.
// Every process still in the namespace is killed when t ends.
func bridgePort(t *testing.T, node *netnstest.NS, tag, hostIf, mac string) *netnstest.NS {
	t.Helper()
	n := netnstest.New(t, tag)
	t.Cleanup(func() { killAllIn(n) })
	node.MustRun(t, "ip", "link", "add", hostIf, "type", "veth", "peer", "name", "eth0", "netns", n.Name)
	node.MustRun(t, "ip", "link", "set", hostIf, "master", "vmlane0", "up")
	n.MustRun(t, "ip", "link", "set", "eth0", "address", mac, "up")
	return n
}

// killAllIn SIGKILLs every process in n: clients this test started there
// and anything they forked (dhcpcd's privilege-separated helpers).
func killAllIn(n *netnstest.NS) {
	out, _ := exec.Command("ip", "netns", "pids", n.Name).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// clientScript is every client's script: it records the environment of
// each call in a numbered file named for the reason (udhcpc passes it as
// $1, dhclient and dhcpcd as $reason) and, for the clients that leave it to
// their script (udhcpc, dhclient; dhcpcd configures by itself), sets the
// address so that renewals and releases can be unicast from it.
const clientScript = `#!/bin/sh
d='%s' configure=%t
r=${reason:-$1}
n=$(ls "$d" | grep -c '^ev\.')
env > "$d/tmp.$$" && mv "$d/tmp.$$" "$d/ev.$((n + 1)).$r"
$configure || exit 0
case "$r" in
bound|renew)
	if [ -n "$ipv6" ]; then # udhcpc6
		ip -6 addr replace "$ipv6/128" dev "$interface" nodad
	else
		ip addr replace "$ip/$mask" dev "$interface"
	fi ;;
deconfig) ip -4 addr flush dev "$interface"; ip -6 addr flush dev "$interface" scope global; ip link set "$interface" up ;;
PREINIT) ip link set "$interface" up ;;
BOUND|RENEW|REBIND|REBOOT) ip addr replace "$new_ip_address/$new_subnet_mask" dev "$interface" ;;
RELEASE|EXPIRE|STOP|FAIL) ip addr flush dev "$interface" ;;
esac
exit 0
`

// client is one DHCP client run as a VM's NIC would be: its namespace's
// eth0 is a port of vmlaned's bridge with the MAC of a CNI reservation.
type client struct {
	kind              *clientKind
	ns                *netnstest.NS
	dir, script       string
	mac, ip, pod, cid string
	ip6               string // the reservation's IPv6 address on a dual-stack node
	cmd               *exec.Cmd
	out               syncBuffer
}

// newClient reserves an address through the CNI plugin for pod vm-<tag>
// and makes the namespace that stands in for that pod's VM. Its port takes
// the place of the pod's: the same name, so the port the lease names, with
// the pod's anti-spoofing, and where vmlaned sends the client's replies.
func newClient(t *testing.T, d *standalone, kind *clientKind, tag string) *client {
	t.Helper()
	privtest.Require(t, kind.tools...)
	c := &client{kind: kind, dir: t.TempDir(), pod: "vm-" + tag, cid: "cid-" + tag}
	res := d.cniAddResult(t, netnstest.New(t, "pod-"+tag), c.cid, c.pod)
	c.mac, c.ip = res.Interfaces[len(res.Interfaces)-1].Mac, res.IPs[0].Address.IP.String()
	if len(res.IPs) > 1 {
		c.ip6 = res.IPs[1].Address.IP.String()
	}
	port := plugin.HostVethName(leases.Key{ContainerID: c.cid, IfName: "eth0"})
	d.node.MustRun(t, "ip", "link", "del", port)
	c.ns = bridgePort(t, d.node, tag, port, c.mac)
	c.script = c.write(t, "script.sh", fmt.Sprintf(clientScript, c.dir, kind.configures), 0o755)
	return c
}

// write writes a file into the client's folder and returns its path.
func (c *client) write(t *testing.T, name, data string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(c.dir, name)
	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// start runs the client resident; it is killed when t ends.
func (c *client) start(t *testing.T, probe bool) {
	t.Helper()
	c.cmd = c.kind.command(t, c, probe)
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill everything in the namespace: dhcpcd's privilege-separated
	// helpers outlive it and would keep its output pipe open.
	c.cmd.WaitDelay = time.Second
	t.Cleanup(func() {
		killAllIn(c.ns)
		c.cmd.Wait()
		if t.Failed() {
			t.Logf("%s (%s, %s) output:\n%s", c.kind.name, c.mac, c.ip, c.out.String())
		}
	})
}

// signal sends sig to the resident client.
func (c *client) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signalling %s: %v", c.kind.name, err)
	}
}

// event is one call of the client's script.
type event struct {
	n      int
	reason string
	env    map[string]string
}

// events reads the script's calls, in order.
func (c *client) events() []event {
	ents, _ := os.ReadDir(c.dir)
	var evs []event
	for _, e := range ents {
		f := strings.SplitN(e.Name(), ".", 3)
		if len(f) != 3 || f[0] != "ev" {
			continue
		}
		ev := event{reason: f[2], env: map[string]string{}}
		ev.n, _ = strconv.Atoi(f[1])
		data, _ := os.ReadFile(filepath.Join(c.dir, e.Name()))
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				ev.env[k] = v
			}
		}
		evs = append(evs, ev)
	}
	slices.SortFunc(evs, func(a, b event) int { return a.n - b.n })
	return evs
}

// reasons lists the script calls from number after on.
func (c *client) reasons(after int) []string {
	var rs []string
	for _, ev := range c.events() {
		if ev.n > after {
			rs = append(rs, ev.reason)
		}
	}
	return rs
}

// last is the number of the script's latest call (0 before the first).
func (c *client) last() int {
	evs := c.events()
	if len(evs) == 0 {
		return 0
	}
	return evs[len(evs)-1].n
}

// waitEvent waits for a script call with reason numbered after after.
func (c *client) waitEvent(t *testing.T, reason string, after int) event {
	t.Helper()
	return c.waitEventFor(t, reason, after, 20*time.Second)
}

// waitEventFor is waitEvent for up to d.
func (c *client) waitEventFor(t *testing.T, reason string, after int, d time.Duration) event {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		for _, ev := range c.events() {
			if ev.n > after && ev.reason == reason {
				return ev
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %q from the script; it saw %v", c.kind.name, reason, c.reasons(after))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lease is the lease file's lease for the client's address.
func (c *client) lease(t *testing.T, d *standalone) leases.Lease {
	t.Helper()
	snap, err := leases.Read(d.leaseFile)
	if err != nil {
		t.Fatal(err)
	}
	l, ok := snap.ByIP(mustAddr(t, c.ip))
	if !ok {
		t.Fatalf("no lease for %s in the lease file", c.ip)
	}
	return l
}

// waitLease polls the lease file until cond holds for the client's lease.
func (c *client) waitLease(t *testing.T, d *standalone, what string, cond func(leases.Lease) bool) leases.Lease {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		l := c.lease(t, d)
		if cond(l) {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: lease never %s: %+v; the script saw %v", c.kind.name, what, l, c.reasons(0))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// within reports whether got is want give or take slack.
func within(got, want time.Time, slack time.Duration) bool {
	return got.After(want.Add(-slack)) && got.Before(want.Add(slack))
}

// mustAddr parses an address a test got from a CNI result or a flag.
func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// phases returns each, which runs fn for every client in parallel
// subtests of a phase, and stops t after a phase that failed: the client
// tests run bind, renew and release so.
func phases(t *testing.T, clients []*client) func(phase string, fn func(t *testing.T, c *client)) {
	return func(phase string, fn func(t *testing.T, c *client)) {
		ok := t.Run(phase, func(t *testing.T) {
			for _, c := range clients {
				t.Run(c.kind.name, func(t *testing.T) { t.Parallel(); fn(t, c) })
			}
		})
		if !ok {
			t.FailNow()
		}
	}
}

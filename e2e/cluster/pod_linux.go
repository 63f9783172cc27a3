package cluster

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/testvm"
	"github.com/vmlane/vmlane/plugin"
)

// Pod is a pod on a node: its network namespace, the address CNI gave it
// and, for a VM pod, the TAP, the MAC and the running guest.
type Pod struct {
	Name string
	Node *Node
	NS   *netnstest.NS
	// IP is the address the CNI plugin reserved (VM) or configured (plain);
	// IP6 the IPv6 one on a dual-stack node (zero otherwise).
	IP  netip.Addr
	IP6 netip.Addr
	// MAC is the VM NIC's address from the CNI result (VM pods).
	MAC string
	// Tap is the TAP device in NS the guest is attached to (VM pods).
	Tap string
	// VM is the running guest (VM pods), nil for a plain pod.
	VM *testvm.VM
	// VMName is the VM the pod is of (its vmlane.io/vm annotation), empty
	// for a pod of no VM.
	VMName string

	list    *libcni.NetworkConfigList
	rt      *libcni.RuntimeConf
	deleted bool
}

// AddVMPod does what a VM runtime does for a VM pod on n: a pod netns, CNI
// ADD with the VM conflist vmlaned wrote, then a QEMU guest on the TAP
// with the result's MAC that configures itself by DHCP and stays up. It
// returns once the guest is booting; see [Pod.WaitVM].
func (n *Node) AddVMPod(tb testing.TB, name string) *Pod {
	tb.Helper()
	return n.AddVMPodOf(tb, name, VMPod{})
}

// VMPod is what makes a VM pod of [Node.AddVMPodOf] more than a VM
// runtime's pod.
type VMPod struct {
	// VM, when set, makes the pod a pod of the VM default/VM: annotated
	// vmlane.io/vm, passed to the plugin as containerd passes a pod's
	// annotations (the io.kubernetes.cri.pod-annotations capability).
	// Its QEMU serves a QMP monitor, for [Pod.MigrateTo].
	VM string
	// From, when set, makes the pod the target of a live migration from
	// From, a running pod of the same VM: annotated
	// vmlane.io/migration-target with From's name, as the plugin asks of
	// a second pod of a running VM, and its QEMU waits for the stream
	// instead of booting a guest.
	From *Pod
}

// AddVMPodOf is AddVMPod of a pod as o says. A migration target's guest
// is the one its migration brings: it takes commands at once, and
// [Pod.WaitVM] does not apply.
func (n *Node) AddVMPodOf(tb testing.TB, name string, o VMPod) *Pod {
	tb.Helper()
	annotations := map[string]string{}
	if o.VM != "" {
		annotations[plugin.VMAnnotation] = o.VM
	}
	if o.From != nil {
		if o.From.VMName != o.VM || o.VM == "" {
			tb.Fatalf("pod %s: a migration's target must be of the VM of its source %s (%q), got %q", name, o.From.Name, o.From.VMName, o.VM)
		}
		annotations[plugin.MigrationTargetAnnotation] = o.From.Name
	}
	p := n.addPod(tb, name, true, annotations)
	p.VMName = o.VM
	cfg := testvm.Config{
		NetNS: p.NS.Path, Tap: p.Tap, MAC: p.MAC, Mode: testvm.ModeDHCP, IPv6: p.IP6.IsValid(), Hold: true, Timeout: n.c.Opts.VMTimeout,
	}
	if o.VM != "" {
		// A unix socket's path has room for 107 bytes: not under a
		// test's temporary folder.
		dir, err := os.MkdirTemp("", "vmlane-vm-")
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { os.RemoveAll(dir) })
		cfg.QMP = filepath.Join(dir, "qmp")
		if o.From != nil {
			cfg.Incoming = filepath.Join(dir, "in")
		}
	}
	vm, err := n.c.guest.Start(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("pod %s: starting the guest: %v", name, err)
	}
	p.VM = vm
	tb.Cleanup(func() { vm.Stop() })
	return p
}

// MigrateTo live-migrates p's guest into target, a pod of the same VM
// made with [VMPod] From p, and returns when QEMU reports the migration
// completed. The stream goes over a unix socket, both QEMUs running on
// this machine. p's QEMU stays, paused, until p is deleted, as KubeVirt
// deletes a migration's source pod after it.
func (p *Pod) MigrateTo(target *Pod) (MigrationStatus, error) {
	if p.VM == nil || target.VM == nil || p.VM.Config().QMP == "" || target.VM.Config().Incoming == "" {
		return MigrationStatus{}, fmt.Errorf("migrating %s to %s: want a pod of a VM (VMPod.VM) and a target made From it", p.Name, target.Name)
	}
	incoming := target.VM.Config().Incoming
	q, err := DialQMP(p.VM.Config().QMP, time.Minute)
	if err != nil {
		return MigrationStatus{}, err
	}
	defer q.Close()
	tq, err := DialQMP(target.VM.Config().QMP, time.Minute)
	if err != nil {
		return MigrationStatus{}, err
	}
	defer tq.Close()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(incoming); err == nil {
			break
		} else if time.Now().After(deadline) {
			return MigrationStatus{}, fmt.Errorf("migrating %s to %s: the target's QEMU is not waiting: %w", p.Name, target.Name, err)
		}
	}
	return Migrate(q, tq, "unix:"+incoming)
}

// WaitVM waits until p's guest has its DHCP lease (and on a dual-stack
// node its DHCPv6 address) and has pinged its gateway, and checks each is
// exactly the reserved address.
func (p *Pod) WaitVM(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := p.VM.Held(ctx)
	if err != nil {
		tb.Fatalf("VM pod %s: %v", p.Name, err)
	}
	if res.DHCP == nil || res.DHCP.IP != p.IP {
		tb.Fatalf("VM pod %s: DHCP lease %+v, want the reserved %s\n%s", p.Name, res.DHCP, p.IP, res.Console)
	}
	if p.IP6.IsValid() && (res.DHCP6 == nil || res.DHCP6.IP != p.IP6 || res.Net6 == nil) {
		tb.Fatalf("VM pod %s: DHCPv6 %+v, IPv6 %+v, want the reserved %s and a default router\n%s", p.Name, res.DHCP6, res.Net6, p.IP6, res.Console)
	}
}

// AddPod does what a container runtime does for a plain pod on n: a pod
// netns and CNI ADD with the plain conflist. The pod serves
// /cgi-bin/whoami on port 80, like the VM guests.
func (n *Node) AddPod(tb testing.TB, name string) *Pod {
	tb.Helper()
	p := n.addPod(tb, name, false, nil)
	ServeWhoAmI(tb, p.NS, filepath.Join(n.Dir, "www-"+name))
	return p
}

// addPod makes pod name's namespace and runs CNI ADD with the VM or the
// plain conflist, with annotations as the pod's.
func (n *Node) addPod(tb testing.TB, name string, vm bool, annotations map[string]string) *Pod {
	tb.Helper()
	list, err := libcni.ConfListFromFile(n.ConfList(vm))
	if err != nil {
		tb.Fatalf("pod %s: %v", name, err)
	}
	p := &Pod{Name: name, Node: n, NS: netnstest.New(tb, "pod-"+name), list: list}
	p.rt = &libcni.RuntimeConf{
		ContainerID: "e2e-" + name, NetNS: p.NS.Path, IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", name}, {"K8S_POD_UID", "uid-" + name}},
	}
	if len(annotations) > 0 {
		p.rt.CapabilityArgs = map[string]any{plugin.PodAnnotationsCapability: annotations}
	}
	ctx, cancel := context.WithTimeout(context.Background(), cniTimeout)
	defer cancel()
	var res *current.Result
	// The plugin runs in the node's namespace, as the runtime runs it on
	// the node: exec forks from the thread Do switched.
	err = n.NS.Do(func() error {
		r, err := n.cni.AddNetworkList(ctx, list, p.rt)
		if err != nil {
			return err
		}
		res, err = current.NewResultFromResult(r)
		return err
	})
	if err != nil {
		tb.Fatalf("pod %s: CNI ADD on %s: %v", name, n.Name, err)
	}
	tb.Cleanup(func() { p.Delete(tb) })
	if len(res.IPs) == 0 || res.IPs[0].Interface == nil {
		tb.Fatalf("pod %s: CNI result without an address on an interface: %+v", name, res)
	}
	ip, _ := netip.AddrFromSlice(res.IPs[0].Address.IP.To4())
	p.IP = ip
	if len(res.IPs) > 1 {
		p.IP6, _ = netip.AddrFromSlice(res.IPs[1].Address.IP)
	}
	if vm {
		iface := res.Interfaces[len(res.Interfaces)-1] // the TAP comes last
		p.Tap, p.MAC = iface.Name, iface.Mac
	}
	return p
}

// Delete stops p's guest and runs CNI DEL, as the runtime does when the
// pod goes. It may be called more than once.
func (p *Pod) Delete(tb testing.TB) {
	tb.Helper()
	if p.deleted {
		return
	}
	p.deleted = true
	if p.VM != nil {
		p.VM.Stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), cniTimeout)
	defer cancel()
	if err := p.Node.NS.Do(func() error { return p.Node.cni.DelNetworkList(ctx, p.list, p.rt) }); err != nil {
		tb.Errorf("pod %s: CNI DEL: %v", p.Name, err)
	}
}

// PingResult is one ping from a pod.
type PingResult = testvm.PingResult

// Ping pings target count times from inside p: from the guest for a VM
// pod, from the pod's namespace for a plain one.
func (p *Pod) Ping(ctx context.Context, target netip.Addr, count int) (PingResult, error) {
	if p.VM != nil {
		return p.VM.Ping(ctx, target.String(), count)
	}
	out, err := p.NS.Run("ping", "-c", strconv.Itoa(count), "-i", "0.2", "-W", "2", target.String())
	r := parsePing(out, target, count)
	r.OK = r.OK && err == nil
	return r, nil
}

// parsePing reads the summary of iputils' ping ("3 received") or
// busybox's ("3 packets received", in the test pods' image): replies and
// the average round trip. OK means every request was answered.
func parsePing(out string, target netip.Addr, count int) PingResult {
	r := PingResult{Target: target.String(), Sent: count}
	if m := recvRE.FindStringSubmatch(out); m != nil {
		r.Recv, _ = strconv.Atoi(m[1])
	}
	if m := rttRE.FindStringSubmatch(out); m != nil {
		ms, _ := strconv.ParseFloat(m[1], 64)
		r.RTT = time.Duration(ms * float64(time.Millisecond))
	}
	r.OK = r.Recv == count
	return r
}

var (
	recvRE = regexp.MustCompile(`(\d+) (?:packets )?received`)
	rttRE  = regexp.MustCompile(`= [\d.]+/([\d.]+)/`)
)

// WhoAmI asks target's /cgi-bin/whoami from inside p and returns the
// address target saw p's request come from.
func (p *Pod) WhoAmI(ctx context.Context, target netip.Addr) (string, error) {
	url := "http://" + netip.AddrPortFrom(target, 80).String() + "/cgi-bin/whoami"
	if p.VM != nil {
		return p.VM.Fetch(ctx, url)
	}
	out, err := p.NS.Run("timeout", "5", "busybox", "wget", "-q", "-O", "-", url) // no -T: see Node.Ready
	if err != nil {
		return "", fmt.Errorf("wget %s from pod %s: %w: %s", url, p.Name, err, out)
	}
	return strings.TrimSpace(out), nil
}

//go:build darwin && realmac

package main

// TestOnARealMac is the part of .github/workflows/macos.yml that needs the
// route controller: it runs on a Mac, as root, with `-tags realmac`, and
// nowhere else. The API server is a fake clientset (a Mac cannot host the
// Linux harness's control plane); everything else is real: route(8), the
// routing table, pf, vmnet and a QEMU guest on vmnet's shared network.
//
//	sudo -E go test -tags realmac -run TestOnARealMac -v ./cmd/vmlaned
//
// VMLANE_GUEST_DIR names the test guest (vmlinuz, initrd.img); without it
// (an Apple Silicon runner, which has no nested virtualisation for a
// guest) the guest's part is left out and the test says so;
// VMLANE_BIN_DIR the darwin vmlanectl (for the teardown after), and
// VMLANE_MAC_UPLINK the Mac's uplink (default en0).

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/vmlane/vmlane/pf"
	"github.com/vmlane/vmlane/routes"
)

func TestOnARealMac(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("run as root: route(8), pfctl and vmnet need it")
	}
	guest := os.Getenv("VMLANE_GUEST_DIR")
	uplink := os.Getenv("VMLANE_MAC_UPLINK")
	if uplink == "" {
		uplink = "en0"
	}
	macIP := ifaceIPv4(t, uplink)
	gw := defaultGateway(t)
	pod, remote := netip.MustParsePrefix("10.244.77.0/24"), netip.MustParsePrefix("10.244.88.0/24")
	remotePod := netip.MustParseAddr("10.244.88.5")

	c := &config{NodeName: "mac", RouteProtocol: routes.DefaultProtocol, Resync: 2 * time.Second, PFAnchor: pf.DefaultAnchor,
		VmnetPlist: pf.DefaultVmnetPlist, VmnetNetworkFile: filepath.Join(t.TempDir(), "net.json"), LeaseFile: filepath.Join(t.TempDir(), "leases.json")}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	mode, err := pf.ModeFor(productVersion(t))
	if err != nil {
		t.Fatal(err)
	}
	d := &darwinNode{c: c, log: log, v: &vmnet{c: c, mode: mode, log: log}}
	reg := prometheus.NewRegistry()
	if _, err := d.setup(context.Background(), pod, reg); err != nil {
		t.Fatal(err)
	}
	node := func(name string, p netip.Prefix, ip netip.Addr) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		n.Spec.PodCIDR, n.Spec.PodCIDRs = p.String(), []string{p.String()}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip.String()}}
		return n
	}
	client := fake.NewSimpleClientset(node("mac", pod, macIP), node("far", remote, gw))
	ctrl, err := d.controller(context.Background(), client, record.NewFakeRecorder(100), reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		// The routes, the anchor and the pf reference go; vmnet's plist
		// gets its old values back.
		exec.Command(filepath.Join(os.Getenv("VMLANE_BIN_DIR"), "vmlanectl"), "teardown").Run()
	})
	go ctrl.Run(ctx)
	select {
	case <-ctrl.Ready():
	case <-time.After(time.Minute):
		t.Fatal("the route controller did not sync")
	}

	// The route and the anchor are in place.
	out := must(t, "route", "-n", "get", remotePod.String())
	if !strings.Contains(out, "gateway: "+gw.String()) {
		t.Fatalf("route -n get %s:\n%s", remotePod, out)
	}
	out = must(t, "pfctl", "-a", pf.DefaultAnchor, "-s", "nat")
	if !strings.Contains(out, "no nat inet from "+pod.String()) {
		t.Fatalf("anchor:\n%s", out)
	}

	if guest == "" {
		t.Log("VMLANE_GUEST_DIR is not set: no guest pings through the anchor here")
	} else {
		throughTheAnchor(t, guest, uplink, macIP, gw, pod, remotePod)
	}

	// pfctl -f /etc/pf.conf and pfctl -d: the next full passes bring the
	// anchor and vmlane's pf reference back; a main ruleset without the
	// hook is reported.
	must(t, "pfctl", "-f", "/etc/pf.conf")
	must(t, "pfctl", "-d")
	waitFor(t, "pf enabled and the anchor loaded again", func() bool {
		info, _ := exec.Command("pfctl", "-s", "info").CombinedOutput()
		rules, _ := exec.Command("pfctl", "-a", pf.DefaultAnchor, "-s", "nat").CombinedOutput()
		return strings.Contains(string(info), "Status: Enabled") && strings.Contains(string(rules), "no nat inet from "+pod.String())
	})
	load := exec.Command("pfctl", "-f", "-")
	load.Stdin = strings.NewReader("pass all\n")
	if out, err := load.CombinedOutput(); err != nil {
		t.Fatalf("loading a ruleset without the hook: %v\n%s", err, out)
	}
	waitFor(t, "the missing hook reported", func() bool { return d.hook.get() != "" })
	must(t, "pfctl", "-f", "/etc/pf.conf")
	waitFor(t, "the hook back", func() bool { return d.hook.get() == "" })
}

// throughTheAnchor boots the test guest on vmnet's shared network: it
// pings a pod on the remote node and the outside (the Mac's own gateway),
// and tcpdump on the uplink shows the first with the VM's own address, the
// second with the Mac's.
func throughTheAnchor(t *testing.T, guest, uplink string, macIP, gw netip.Addr, pod netip.Prefix, remotePod netip.Addr) {
	t.Helper()
	dump, err := os.CreateTemp(t.TempDir(), "tcpdump")
	if err != nil {
		t.Fatal(err)
	}
	td := exec.Command("tcpdump", "-i", uplink, "-n", "-l", "icmp")
	td.Stdout = dump
	if err := td.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	console := filepath.Join(t.TempDir(), "console.txt")
	q := exec.Command("qemu-system-x86_64", "-accel", "hvf", "-machine", "pc", "-m", "256M", "-display", "none",
		"-serial", "file:"+console, "-kernel", filepath.Join(guest, "vmlinuz"), "-initrd", filepath.Join(guest, "initrd.img"),
		"-append", "console=ttyS0 quiet panic=-1 vmlane.mode=dhcp vmlane.mac=52:54:00:4d:00:08 vmlane.pingcount=3 vmlane.ping="+remotePod.String()+","+gw.String(),
		"-netdev", "vmnet-shared,id=n0", "-device", "virtio-net-pci,netdev=n0,mac=52:54:00:4d:00:08,romfile=", "-no-reboot")
	if out, err := q.CombinedOutput(); err != nil {
		t.Fatalf("qemu: %v\n%s", err, out)
	}
	td.Process.Signal(os.Interrupt)
	td.Wait()
	con, _ := os.ReadFile(console)
	m := regexp.MustCompile(`VMLANE-NET .* ip=(10\.244\.77\.\d+)/`).FindSubmatch(con)
	if m == nil {
		t.Fatalf("the guest got no address in %s:\n%s", pod, con)
	}
	vm := string(m[1])
	seen, _ := os.ReadFile(dump.Name())
	if !strings.Contains(string(seen), vm+" > "+remotePod.String()+": ICMP echo request") {
		t.Errorf("no echo request from the VM's own address %s to %s on %s:\n%s", vm, remotePod, uplink, seen)
	}
	if !strings.Contains(string(seen), macIP.String()+" > "+gw.String()+": ICMP echo request") {
		t.Errorf("no masqueraded echo request from %s to the outside %s:\n%s", macIP, gw, seen)
	}
	if out := must(t, "pfctl", "-a", pf.DefaultAnchor, "-vs", "nat"); !regexp.MustCompile(`Packets: [1-9]`).MatchString(out) {
		t.Errorf("the anchor's counters did not rise:\n%s", out)
	}

}

func must(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30 s", what)
		}
	}
}

func ifaceIPv4(t *testing.T, name string) netip.Addr {
	t.Helper()
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		t.Fatal(err)
	}
	addrs, _ := ifc.Addrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			ip, _ := netip.AddrFromSlice(n.IP.To4())
			return ip
		}
	}
	t.Fatalf("%s has no IPv4 address", name)
	return netip.Addr{}
}

func defaultGateway(t *testing.T) netip.Addr {
	t.Helper()
	out := must(t, "route", "-n", "get", "default")
	m := regexp.MustCompile(`gateway: (\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no default gateway:\n%s", out)
	}
	return netip.MustParseAddr(m[1])
}

func productVersion(t *testing.T) string {
	t.Helper()
	v, err := pf.ProductVersion()
	if err != nil {
		t.Fatal(err)
	}
	return v
}
